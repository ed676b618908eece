"""``HorovodTrainer``: a Horovod training function on the warm pool (``ray.train.horovod``)."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
from dataclasses import dataclass
from typing import Callable

from ...cluster.worker.task_context import takes_config
from ..checkpoint import Checkpoint
from ..config import RunConfig, ScalingConfig
from ..torch import TorchTrainer


@dataclass
class HorovodConfig:
    """Horovod's settings (``ray.train.horovod.HorovodConfig``). raynb serves Horovod's
    PyTorch API over the run's own group, so only ``timeout_s`` matters (the group's
    timeout is the run's ``ScalingConfig.timeout_s``); the others are kept for Ray's
    signature.
    """

    nics: set | None = None
    verbose: int = 1
    key: str | None = None
    ssh_port: int | None = None
    ssh_identity_file: str | None = None
    ssh_str: str | None = None
    timeout_s: int = 300
    placement_group_timeout_s: int = 100


def _real_horovod_torch() -> bool:
    """True when the real ``horovod.torch`` is installed (then it is left to the user's import)."""
    if "horovod" in sys.modules and not getattr(sys.modules["horovod"], "_raynb_served", False):
        return True
    try:
        return importlib.util.find_spec("horovod.torch") is not None
    except (ImportError, ValueError):
        return False


@contextlib.contextmanager
def served_horovod():
    """``import horovod.torch`` gives raynb's API inside the block, unless the real Horovod
    is installed; the names added to ``sys.modules`` are removed after."""
    if _real_horovod_torch():
        yield
        return
    from . import torch as hvd_torch

    package = types.ModuleType("horovod")
    package.__path__ = []  # a package: ``import horovod.torch`` looks here first, in sys.modules
    package._raynb_served = True
    package.torch = hvd_torch
    added = [n for n in ("horovod", "horovod.torch") if n not in sys.modules]
    sys.modules.setdefault("horovod", package)
    sys.modules.setdefault("horovod.torch", hvd_torch)
    try:
        yield
    finally:
        hvd_torch.shutdown()
        for name in added:
            sys.modules.pop(name, None)


class _WithHorovod:
    """The user's function, run with Horovod's API importable (what the ranks call)."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "train_loop_per_worker")

    def __call__(self, config):
        with served_horovod():
            return self.fn(config) if takes_config(self.fn) else self.fn()


class HorovodTrainer(TorchTrainer):
    """A Horovod training function on every rank of the run (``ray.train.horovod.HorovodTrainer``).

    Inside it, ``import horovod.torch as hvd`` and use Horovod as usual (``hvd.init()``,
    ``hvd.DistributedOptimizer``, ``hvd.broadcast_parameters``, ...): served over raynb's
    torch.distributed group (see :mod:`raynb.train.horovod.torch`), so the second ``fit()``
    of a cell starts on the warm ranks. Import ``horovod.torch`` inside the function.

    Args:
        train_loop_per_worker: ``f()`` or ``f(config)``.
        train_loop_config (dict | None): ``f``'s config.
        horovod_config (HorovodConfig | None): Horovod's settings.
        scaling_config, run_config, datasets, resume_from_checkpoint: as ``TorchTrainer``'s.

    Raises:
        TypeError: ``horovod_config`` is not a HorovodConfig (and as ``TorchTrainer``).
    """

    _name_prefix = "HorovodTrainer"

    def __init__(
        self,
        train_loop_per_worker: Callable,
        *,
        train_loop_config: dict | None = None,
        horovod_config: HorovodConfig | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        datasets: dict | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
    ):
        if horovod_config is not None and not isinstance(horovod_config, HorovodConfig):
            raise TypeError(f"horovod_config must be a HorovodConfig, got {type(horovod_config).__name__}")
        self.horovod_config = horovod_config or HorovodConfig()
        inner = getattr(train_loop_per_worker, "__wrapped__", train_loop_per_worker)
        fn = (
            train_loop_per_worker
            if isinstance(inner, _WithHorovod) or not callable(train_loop_per_worker)
            else _WithHorovod(train_loop_per_worker)
        )
        super().__init__(
            fn,
            train_loop_config=train_loop_config,
            scaling_config=scaling_config,
            run_config=run_config,
            datasets=datasets,
            resume_from_checkpoint=resume_from_checkpoint,
        )
