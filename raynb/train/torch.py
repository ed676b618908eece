"""PyTorch specifics (``ray.train.torch``): the trainer and the DDP helpers.

``prepare_model`` and ``prepare_data_loader`` run on the workers, inside the
training function, where the process group is already formed.
"""

from __future__ import annotations

import os
from typing import Callable

from . import deepspeed_ranks, lightning_guard, tensorflow_guard
from . import session as _session
from .checkpoint import Checkpoint
from .config import CheckpointConfig, FailureConfig, Result, RunConfig, ScalingConfig
from .elastic import elastic_interval, recorded_num_workers
from .framework_checkpoints import TorchCheckpoint  # noqa: F401 - Ray's (deprecated) name
from .profiling import profile  # noqa: F401 - raynb.train.torch.profile(), as a context on the ranks
from .torch_utils import (  # noqa: F401 - Ray's names at ray.train.torch
    TorchConfig,
    accelerate,
    backward,
    enable_reproducibility,
    prepare_optimizer,
)

# A pl.Trainer(strategy="ddp") in a training function is named, whether or not it imported
# raynb.train.lightning (the zygote imports this module, so every worker has the hook).
lightning_guard.install()
# deepspeed.initialize() in a training function trains on the warm ranks (see deepspeed_ranks).
deepspeed_ranks.install()
# Likewise a MultiWorkerMirroredStrategy outside a TensorflowTrainer (no TF_CONFIG) is named.
tensorflow_guard.install()


def get_device():
    """This worker's ``torch.device``: the CUDA device the head assigned to this rank
    when the run uses GPUs (one GPU per rank), else cpu."""
    import torch

    task = _session._require("get_device")
    if task.get("use_gpu") and task.get("gpu_id") is not None:
        return torch.device("cuda", task["gpu_id"])
    return torch.device("cpu")


GRADIENT_COMPRESSION = ("fp16", "bf16")


def get_devices() -> list:
    """This rank's devices, a list of one ``torch.device`` (``get_device()``), as Ray's."""
    return [get_device()]


def prepare_model(
    model,
    move_to_device: bool = True,
    parallel_strategy: str | None = "ddp",
    parallel_strategy_kwargs: dict | None = None,
    gradient_compression: str | None = None,
):
    """Move ``model`` to this worker's device and wrap it in DistributedDataParallel.

    Args:
        model (torch.nn.Module): the model, built the same way on every rank.
        move_to_device (bool): move parameters to :func:`get_device` first.
        parallel_strategy ("ddp" | "fsdp" | None): None returns the model unwrapped; "fsdp"
            shards its parameters over the ranks (FSDP2 ``fully_shard``; see ``raynb.train.fsdp``).
        parallel_strategy_kwargs (dict | None): passed to ``DistributedDataParallel``, or
            for "fsdp" to ``fully_shard`` (plus ``modules``: the classes to shard as units).
        gradient_compression ("fp16" | "bf16" | None): all-reduce the gradients in half
            precision (half the bytes on the wire), through DDP's communication hook
            ``torch.distributed.algorithms.ddp_comm_hooks.default_hooks.fp16_compress_hook``
            / ``bf16_compress_hook`` (the gradients are cast back after the all-reduce).

    Returns:
        The DDP-wrapped (or FSDP-sharded) model when the world size is > 1, else the model itself.
        DDP broadcasts rank 0's initial parameters, so every rank starts equal.
    """
    import torch

    task = _session._require("prepare_model")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"prepare_model() takes a torch.nn.Module, got {type(model).__name__}")
    if gradient_compression not in (None, *GRADIENT_COMPRESSION):
        raise ValueError(
            f"prepare_model(gradient_compression={gradient_compression!r}): use 'fp16', 'bf16' or None"
        )
    device = get_device()
    if move_to_device:
        model = model.to(device)
    if parallel_strategy is None or task["world_size"] < 2:
        return model
    if parallel_strategy == "fsdp":
        return _shard_fsdp(model, device, parallel_strategy_kwargs, gradient_compression)
    if parallel_strategy != "ddp":
        raise ValueError(
            f"parallel_strategy={parallel_strategy!r} is not supported; use 'ddp', 'fsdp' or None"
        )
    return _wrap_ddp(model, device, parallel_strategy_kwargs, gradient_compression)


def _shard_fsdp(model, device, parallel_strategy_kwargs: dict | None, gradient_compression: str | None):
    """prepare_model's "fsdp" branch: ``model`` sharded over the ranks (FSDP2)."""
    if gradient_compression is not None:
        raise ValueError(
            "gradient_compression is DDP's; for FSDP pass a MixedPrecisionPolicy as "
            "parallel_strategy_kwargs={'mp_policy': ...}"
        )
    from .fsdp import shard_model

    return shard_model(model, device, parallel_strategy_kwargs)


def _wrap_ddp(model, device, parallel_strategy_kwargs: dict | None, gradient_compression: str | None):
    """prepare_model's "ddp" branch: ``model`` in DistributedDataParallel, its gradients'
    all-reduce compressed to half precision when asked."""
    from torch.nn.parallel import DistributedDataParallel

    kwargs = dict(parallel_strategy_kwargs or {})
    if device.type == "cuda":
        kwargs.setdefault("device_ids", [device.index])
    ddp = DistributedDataParallel(model, **kwargs)
    if gradient_compression is not None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hook = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}
        ddp.register_comm_hook(state=None, hook=hook[gradient_compression])
    return ddp


def _to_device(batch, device):
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        moved = [_to_device(b, device) for b in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


class _PreparedDataLoader:
    """A DataLoader whose (batch) sampler advances its epoch on every pass and
    whose batches arrive on this worker's device."""

    def __init__(self, loader, sampler, device):
        self._loader = loader
        self._sampler = sampler
        self._device = device
        self._epoch = 0

    def __iter__(self):
        if self._sampler is not None:
            self._sampler.set_epoch(self._epoch)  # a new shuffle order each pass, same on all ranks
        self._epoch += 1
        for batch in self._loader:
            yield _to_device(batch, self._device) if self._device is not None else batch

    def __len__(self):
        return len(self._loader)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def prepare_data_loader(data_loader, add_dist_sampler: bool = True, move_to_device: bool = True):
    """Shard ``data_loader`` across ranks (``ray.train.torch.prepare_data_loader``).

    With a world size > 1 each rank gets its share, and the epoch advances on each
    pass (a new order, the same on every rank):

    - the default samplers become a ``DistributedSampler`` that keeps the loader's
      ``shuffle`` (a RandomSampler means shuffle=True);
    - a custom ``sampler`` (``WeightedRandomSampler``, ``SubsetRandomSampler``, your
      own) keeps its meaning: every rank draws the same sequence from it, seeded per
      epoch, and takes every world_size-th index of it;
    - a custom ``batch_sampler`` is sharded the same way, by whole batches.

    Batches are moved to :func:`get_device` when ``move_to_device``.

    Args:
        data_loader (torch.utils.data.DataLoader): built as for a single process.
        add_dist_sampler (bool): shard it (when world size > 1).
        move_to_device (bool): move each batch's tensors (also inside tuples, lists,
            dicts) to :func:`get_device`.

    Returns:
        An iterable with the loader's ``len``, ``batch_size``, ``dataset``, ``sampler``.

    Raises:
        ValueError: the loader's dataset is an ``IterableDataset``, or its custom
            sampler has no ``__len__`` (shard it yourself with
            ``get_context().get_world_rank()`` and pass ``add_dist_sampler=False``).
    """
    task = _session._require("prepare_data_loader")
    device = get_device() if move_to_device else None
    epoch_sampler = _epoch_sampler(data_loader)
    if add_dist_sampler and task["world_size"] > 1 and epoch_sampler is None:
        data_loader, epoch_sampler = _sharded_loader(data_loader, task["world_size"], task["rank"])
    return _PreparedDataLoader(data_loader, epoch_sampler, device)


def _epoch_sampler(loader):
    """The loader's sharding (batch) sampler, whose epoch advances each pass, or None
    when the loader is not sharded (yet)."""
    from torch.utils.data.distributed import DistributedSampler

    from .samplers import DistributedBatchSamplerWrapper

    for s in (loader.sampler, getattr(loader.batch_sampler, "sampler", None), loader.batch_sampler):
        if isinstance(s, (DistributedSampler, DistributedBatchSamplerWrapper)):
            return s
    return None


def _sharded_loader(loader, world_size: int, rank: int):
    """(a copy of ``loader`` that yields this rank's share, the sampler whose epoch advances)."""
    from torch.utils.data import DataLoader, IterableDataset, RandomSampler, SequentialSampler
    from torch.utils.data.distributed import DistributedSampler

    from .samplers import DistributedBatchSamplerWrapper, DistributedSamplerWrapper

    if isinstance(loader.dataset, IterableDataset):
        raise ValueError(
            "prepare_data_loader() cannot shard an IterableDataset: split it inside its "
            "__iter__ by get_context().get_world_rank(), and pass add_dist_sampler=False"
        )
    common = dict(
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        generator=loader.generator,
        multiprocessing_context=loader.multiprocessing_context,
        pin_memory_device=loader.pin_memory_device,
    )
    if loader.num_workers:
        common.update(persistent_workers=loader.persistent_workers, prefetch_factor=loader.prefetch_factor)
    if loader.batch_size is None and loader.batch_sampler is not None:  # a custom batch_sampler
        batches = DistributedBatchSamplerWrapper(loader.batch_sampler, world_size, rank)
        return DataLoader(loader.dataset, batch_sampler=batches, **common), batches
    if type(loader.sampler) in (RandomSampler, SequentialSampler):
        sampler = DistributedSampler(
            loader.dataset,
            num_replicas=world_size,
            rank=rank,
            shuffle=isinstance(loader.sampler, RandomSampler),
        )
    else:
        sampler = DistributedSamplerWrapper(loader.sampler, world_size, rank)
    return DataLoader(
        loader.dataset, batch_size=loader.batch_size, sampler=sampler, drop_last=loader.drop_last, **common
    ), sampler


class TorchTrainer:
    """Data-parallel PyTorch training on the warm cluster (``ray.train.torch.TorchTrainer``).

    Args:
        train_loop_per_worker: ``f()`` or ``f(config)``, run on every rank. Inside it
            use ``report``, ``get_context``, ``prepare_model``, ``prepare_data_loader``.
        train_loop_config (dict | None): passed to ``train_loop_per_worker``.
        scaling_config (ScalingConfig | None): workers and GPUs (4 CPU workers by default).
        run_config (RunConfig | None): run name, storage path, verbosity, which
            checkpoints to keep (``checkpoint_config``), restarts (``failure_config``).
        datasets (dict[str, raynb.data.Dataset] | None): read on each rank with
            ``raynb.train.get_dataset_shard(name)``; in-memory ones go once per node into
            shared memory when the run is submitted (``raynb.data``).
        resume_from_checkpoint (Checkpoint | None): what ``get_checkpoint()`` returns
            in the first attempt (later restarts get the run's own latest checkpoint).
        dataset_config (DataConfig | None): which ``datasets`` are split between the ranks
            (all by default); the others are read whole by every rank.
        metadata (dict | None): Ray's; kept as ``trainer.metadata`` and returned on the ranks
            by ``get_context().get_metadata()``. JSON values only (TypeError otherwise).

    ``fit()`` connects to the local cluster when this process has no connection
    (as ``raynb.connect()``).

    Raises:
        TypeError: a config of the wrong class, or ``datasets`` not a dict of Datasets.
        ValueError: an in-memory dataset's column torch cannot take (named).
    """

    _name_prefix = "TorchTrainer"  # the run directory's prefix (XGBoostTrainer's own)
    _total_epochs: int | None = None  # the progress bars' total when config["epochs"] is not it

    def __init__(
        self,
        train_loop_per_worker: Callable,
        *,
        train_loop_config: dict | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        datasets: dict | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
        dataset_config=None,
        metadata: dict | None = None,
        torch_config: TorchConfig | None = None,
    ):
        if torch_config is not None:
            if not isinstance(torch_config, TorchConfig):
                raise TypeError(f"torch_config must be a TorchConfig, got {type(torch_config).__name__}")
            torch_config.note()
        if not callable(train_loop_per_worker):
            raise TypeError(
                "train_loop_per_worker must be a function f() or f(config), got "
                f"{type(train_loop_per_worker).__name__}"
            )
        from .datasets import check_datasets

        self.datasets = check_datasets(datasets)  # TypeError / ValueError before anything ships
        from .data_config import DataConfig

        if dataset_config is not None and not isinstance(dataset_config, DataConfig):
            raise TypeError(
                f"dataset_config must be a raynb.train.DataConfig, got {type(dataset_config).__name__}"
            )
        self.dataset_config = dataset_config or DataConfig()
        from .trainer_metadata import check_metadata

        self.metadata = check_metadata(metadata)  # TypeError before anything ships
        if train_loop_config is not None and not isinstance(train_loop_config, dict):
            raise TypeError(
                "train_loop_config must be a dict (train_loop_per_worker(config) gets it), "
                f"got {type(train_loop_config).__name__}: {train_loop_config!r:.80}"
            )
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = train_loop_config
        self.scaling_config = scaling_config or ScalingConfig()
        self.run_config = run_config or RunConfig()
        if not isinstance(self.scaling_config, ScalingConfig):
            raise TypeError(f"scaling_config must be a ScalingConfig, got {type(scaling_config).__name__}")
        if not isinstance(self.run_config, RunConfig):
            raise TypeError(f"run_config must be a RunConfig, got {type(run_config).__name__}")
        if resume_from_checkpoint is not None and not isinstance(resume_from_checkpoint, Checkpoint):
            raise TypeError(
                "resume_from_checkpoint must be a raynb.train.Checkpoint, got "
                f"{type(resume_from_checkpoint).__name__}; use Checkpoint.from_directory(path)"
            )
        self.resume_from_checkpoint = resume_from_checkpoint
        self._resume = False  # set by restore(): continue the run directory in place

    @classmethod
    def restore(
        cls,
        path: str,
        train_loop_per_worker: Callable | None = None,
        train_loop_config: dict | None = None,
        **kwargs,
    ) -> "TorchTrainer":
        """A trainer that continues the run in ``path`` (``TorchTrainer.restore``).

        ``fit()`` then runs in the same directory from its latest checkpoint
        (``get_checkpoint()``), appending to its reports, with the run's scaling,
        checkpoint and failure settings.

        Args:
            path (str): the run directory (``Result.path``).
            train_loop_per_worker: the function to run; None re-runs the one saved
                with the run (``function.pkl``).
            train_loop_config (dict | None): None re-uses the saved config.
            **kwargs: ``scaling_config`` / ``run_config`` to override the saved ones;
                ``datasets`` to give the run its datasets again (the saved ones are used
                otherwise: files are read again, in-memory data was freed with the run).

        Raises:
            FileNotFoundError: ``path`` is not a directory.
            raynb.rundir.CorruptRunDirectory: a file the run needs is missing or
                unreadable (named in the message). Nothing in ``path`` is changed.
        """
        from ..cluster.storage.rundir import read_run_dir

        record = read_run_dir(path, with_reports=False)
        path = record["path"]
        saved = None
        if train_loop_per_worker is None or train_loop_config is None:
            saved = _load_saved_function(path)
        run_config = kwargs.pop("run_config", None) or _saved_run_config(record, path)
        run_config.name, run_config.storage_path = os.path.basename(path), os.path.dirname(path)
        scaling_config = kwargs.pop("scaling_config", None) or ScalingConfig(
            num_workers=recorded_num_workers(record),
            use_gpu=bool(record.get("use_gpu")),
            timeout_s=record.get("timeout_s"),
            **elastic_interval(record),
        )
        datasets = kwargs.pop("datasets", None)
        if kwargs:
            raise TypeError(f"restore() got unexpected arguments: {', '.join(kwargs)}")
        fn, datasets, metadata = _unwrap_saved_function(train_loop_per_worker or saved["fn"], datasets)
        trainer = cls(
            fn,
            datasets=datasets,
            train_loop_config=train_loop_config if train_loop_config is not None else saved["config"],
            scaling_config=scaling_config,
            run_config=run_config,
        )
        trainer._resume = True
        trainer.metadata = metadata
        return trainer

    @classmethod
    def can_restore(cls, path: str) -> bool:
        """True when ``path`` is a raynb run directory that ``restore`` can continue."""
        from ..cluster.storage.rundir import FUNCTION_FILE, STATE_FILE

        return all(os.path.isfile(os.path.join(path, f)) for f in (STATE_FILE, "params.json", FUNCTION_FILE))

    def fit(self) -> Result:
        """Run training to the end and return its :class:`Result`.

        Raises:
            raynb.RunError: a rank raised an exception or died.
            UnpicklableError: the function reads something that cannot be shipped.
            ValueError: ``RunConfig(stop=...)`` outside a Tuner (Ray 2.60's trainers refuse it too).
        """
        from .fit_run import execute_run

        if self.run_config.stop is not None:
            raise ValueError(
                "RunConfig(stop=...) stops Tune trials; a TorchTrainer's fit() ends when "
                "train_loop_per_worker returns (as in Ray 2.60's Train): return from the loop, "
                "or run the trainer in tune.Tuner(trainer, run_config=RunConfig(stop=...))"
            )

        extra = {}
        if self.resume_from_checkpoint is not None:
            extra["resume_from_checkpoint"] = self.resume_from_checkpoint.path
        if self._resume:
            extra["resume"] = True
        import shutil

        from ..cluster.storage.rundir import default_storage_path
        from ..data.ray_source import split_ray_datasets
        from .datasets import with_datasets
        from .trainer_metadata import with_metadata

        datasets, split_dirs = split_ray_datasets(
            self.datasets,
            self.scaling_config.max_workers,
            self.run_config.storage_path or default_storage_path(),
        )
        if split_dirs and self.scaling_config.elasticity_enabled:
            for d in split_dirs:
                shutil.rmtree(d, ignore_errors=True)
            raise ValueError(
                "an elastic run (num_workers=(min, max)) cannot take a Ray Dataset, which is "
                "split once for a fixed world size; pass a raynb.data Dataset (re-split per "
                "attempt) or a fixed num_workers"
            )
        try:
            fn = with_datasets(self.train_loop_per_worker, datasets, self.dataset_config.unsplit(datasets))
            fn = with_metadata(fn, self.metadata)  # get_context().get_metadata() on the ranks
            result, _ = execute_run(
                fn,
                self.train_loop_config,
                self.scaling_config,
                self.run_config,
                extra=extra,
                name_prefix=self._name_prefix,
                epochs=self._total_epochs,
            )
        finally:
            for d in split_dirs:  # a Ray Dataset's per-rank files
                shutil.rmtree(d, ignore_errors=True)
        return result


def _unwrap_saved_function(fn, datasets):
    """``(function, datasets, metadata)`` from a function saved with its run, whose wrappers
    carry the trainer's ``metadata=`` and its datasets; ``datasets`` given again win."""
    from .datasets import WithDatasets
    from .trainer_metadata import WithMetadata

    metadata = fn.metadata if isinstance(fn, WithMetadata) else None
    fn = fn.__wrapped__ if isinstance(fn, WithMetadata) else fn
    if isinstance(fn, WithDatasets):
        fn, datasets = fn.__wrapped__, datasets if datasets is not None else fn.datasets
    return fn, datasets, metadata


def _load_saved_function(path: str) -> dict:
    """The function and config saved with the run in ``path`` (its ``function.pkl``).

    Raises:
        raynb.rundir.CorruptRunDirectory: the file is missing or cannot be unpickled.
    """
    import cloudpickle

    from ..cluster.storage.rundir import FUNCTION_FILE, CorruptRunDirectory

    fpath = os.path.join(path, FUNCTION_FILE)
    try:
        with open(fpath, "rb") as f:
            return cloudpickle.load(f)
    except FileNotFoundError:
        raise CorruptRunDirectory(
            f"{fpath} is missing: pass train_loop_per_worker= to restore() to re-run the function"
        ) from None
    except Exception as e:  # noqa: BLE001 - any unpickling failure
        raise CorruptRunDirectory(
            f"{fpath} cannot be loaded ({type(e).__name__}: {e}); pass train_loop_per_worker= to restore()"
        ) from None


def _saved_run_config(record: dict, path: str) -> RunConfig:
    """The RunConfig the run in ``path`` was made with (its checkpoint and failure settings)."""
    cc = record.get("checkpoint_config") or {}
    return RunConfig(
        name=os.path.basename(path),
        storage_path=os.path.dirname(path),
        checkpoint_config=CheckpointConfig(**cc) if cc else None,
        failure_config=FailureConfig(record.get("max_failures") or 0),
    )
