"""Lightning strategies and cluster environment for raynb's ranks (``ray.train.lightning``).

A raynb training function runs on ranks whose ``torch.distributed`` group is already
formed (gloo, or NCCL with GPUs), with ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` set.
Lightning must neither launch processes nor form a group: :class:`RayLightningEnvironment`
reports raynb's ranks and says the processes were created outside Lightning, and the
strategies take their device from :func:`raynb.train.torch.get_device` (Lightning's own
``parallel_devices[local_rank]`` has one entry per *local* device Lightning would launch,
so rank 1 of ``devices="auto"`` on a CPU indexed past its end).
"""

from __future__ import annotations

from .. import session as _session
from ._compat import import_lightning, lightning_environment_class

pl = import_lightning()
_LightningEnvironment = lightning_environment_class(pl)


def _root_device():
    from ..torch import get_device

    return get_device()


class RayLightningEnvironment(_LightningEnvironment):
    """Lightning's cluster environment on raynb's ranks (``ray.train.lightning.RayLightningEnvironment``):
    rank, local rank, node rank and world size are raynb's (``get_context()``); Lightning's
    own setters are ignored, and the processes count as created externally (no launch)."""

    @property
    def creates_processes_externally(self) -> bool:
        return True

    def world_size(self) -> int:
        return _session.get_context().get_world_size()

    def global_rank(self) -> int:
        return _session.get_context().get_world_rank()

    def local_rank(self) -> int:
        return _session.get_context().get_local_rank()

    def node_rank(self) -> int:
        return _session.get_context().get_node_rank()

    def set_world_size(self, size: int) -> None:
        pass

    def set_global_rank(self, rank: int) -> None:
        pass

    def teardown(self) -> None:
        pass  # the group and the RANK variables are raynb's; they outlive the Trainer


class _RayStrategyMixin:
    """What every raynb strategy shares: this rank's device, and a sampler over all ranks."""

    @property
    def root_device(self):
        return _root_device()

    @property
    def distributed_sampler_kwargs(self) -> dict:
        return {"num_replicas": self.world_size, "rank": self.global_rank}


class RayDDPStrategy(_RayStrategyMixin, pl.strategies.DDPStrategy):
    """Lightning's ``DDPStrategy`` over raynb's existing process group
    (``ray.train.lightning.RayDDPStrategy``). Takes ``DDPStrategy``'s arguments (e.g.
    ``find_unused_parameters``); the backend and timeout are the run's, set by raynb."""


class RayFSDPStrategy(_RayStrategyMixin, pl.strategies.FSDPStrategy):
    """Lightning's ``FSDPStrategy`` over raynb's existing process group
    (``ray.train.lightning.RayFSDPStrategy``). Takes ``FSDPStrategy``'s arguments
    (``sharding_strategy``, ``auto_wrap_policy``, ``state_dict_type``, ...).

    Raises:
        RuntimeError: (at ``fit``) the ranks have no GPU: Lightning's FSDP is torch's
            FSDP1, which needs an accelerator (on CPU ranks use ``RayDDPStrategy``, or
            ``prepare_model(parallel_strategy="fsdp")`` in a plain loop: FSDP2 runs on CPU).
    """

    def setup(self, trainer) -> None:
        if self.root_device.type == "cpu":
            raise RuntimeError(
                "RayFSDPStrategy needs GPU ranks (ScalingConfig(use_gpu=True)): Lightning's "
                "FSDP is torch's FullyShardedDataParallel, which does not run on CPU. On CPU "
                "ranks use RayDDPStrategy(), or raynb.train.torch.prepare_model(model, "
                'parallel_strategy="fsdp") in a plain training loop (FSDP2 runs on CPU)'
            )
        super().setup(trainer)


try:
    _DeepSpeedBase = pl.strategies.DeepSpeedStrategy
except AttributeError:  # pragma: no cover - a Lightning without it
    _DeepSpeedBase = pl.strategies.DDPStrategy


class RayDeepSpeedStrategy(_RayStrategyMixin, _DeepSpeedBase):
    """Lightning's ``DeepSpeedStrategy`` over raynb's existing process group
    (``ray.train.lightning.RayDeepSpeedStrategy``). Takes ``DeepSpeedStrategy``'s arguments
    (``stage``, ``offload_optimizer``, ``config``, ...).

    Raises:
        ImportError: deepspeed is not installed (names the extra to install).
        RuntimeError: (at ``fit``) the ranks have no GPU: Lightning's DeepSpeed strategy runs
            only on CUDA (on CPU ranks use ``deepspeed.initialize`` in a plain training
            function, where DeepSpeed's ZeRO runs on CPU, or ``RayDDPStrategy``).
    """

    def __init__(self, *args, **kwargs):
        try:
            import deepspeed  # noqa: F401
        except ImportError:
            raise ImportError(
                'RayDeepSpeedStrategy needs DeepSpeed, which is not installed: pip install "raynb[deepspeed]"'
            ) from None
        super().__init__(*args, **kwargs)

    def setup_environment(self) -> None:
        if self.root_device.type == "cpu":
            # Lightning's own check would say only "The DeepSpeed strategy is only supported
            # on CUDA GPUs but `CPUAccelerator` is used."
            raise RuntimeError(
                "RayDeepSpeedStrategy needs GPU ranks (ScalingConfig(use_gpu=True)): Lightning's "
                "DeepSpeedStrategy runs only on CUDA GPUs. On CPU ranks call deepspeed.initialize("
                "model=..., optimizer=..., config=...) in a plain TorchTrainer function (DeepSpeed's "
                "ZeRO trains on CPU there), or use RayDDPStrategy()"
            )
        super().setup_environment()


RAY_STRATEGIES = (RayDDPStrategy, RayFSDPStrategy, RayDeepSpeedStrategy)


def prepare_trainer(trainer):
    """Check that a ``pl.Trainer`` runs on raynb's ranks (``ray.train.lightning.prepare_trainer``).

    Args:
        trainer (lightning.pytorch.Trainer): built with one of the Ray strategies and
            ``RayLightningEnvironment`` (or no cluster environment plugin).

    Returns:
        The same trainer.

    Raises:
        RuntimeError: its strategy is not a Ray strategy, or its cluster environment is
            not :class:`RayLightningEnvironment`.
    """
    if not isinstance(trainer.strategy, RAY_STRATEGIES):
        raise RuntimeError(
            f"prepare_trainer(): the Trainer's strategy is {type(trainer.strategy).__name__}; "
            "on raynb's ranks use strategy=RayDDPStrategy() (or RayFSDPStrategy(), "
            'RayDeepSpeedStrategy()) from raynb.train.lightning, with devices="auto"'
        )
    env = getattr(trainer.strategy, "cluster_environment", None)
    if env is not None and not isinstance(env, RayLightningEnvironment):
        raise RuntimeError(
            f"prepare_trainer(): the Trainer's cluster environment is {type(env).__name__}; "
            "pass plugins=[RayLightningEnvironment()] from raynb.train.lightning"
        )
    return trainer
