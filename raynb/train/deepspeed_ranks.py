"""DeepSpeed on raynb's warm ranks: ``deepspeed.initialize(...)`` in a ``TorchTrainer``
function trains over the run's process group, with nothing changed in the function.

DeepSpeed finds ``torch.distributed`` initialized and uses the group as it is, and reads the
``RANK`` / ``LOCAL_RANK`` / ``WORLD_SIZE`` / ``MASTER_*`` variables raynb sets. What it also
assumes is ``torchrun``'s (or its own launcher's) process: one group for the life of the
process. A warm worker outlives its group (a run on other ranks, or the restart after a
failure, forms a new one), so when ``deepspeed`` is imported in a worker (an import hook that
:mod:`raynb.train.torch`, which the zygote imports, installs), raynb:

- picks DeepSpeed's accelerator from the run (``DS_ACCELERATOR``, unless set already):
  ``cpu`` on CPU ranks (on a machine with GPUs DeepSpeed would take CUDA and move the model
  there), ``cuda`` on GPU ranks. DeepSpeed keeps it for the life of the process;
- turns off DeepSpeed's shared-memory all-reduce on CPU (the ``deepspeed_shm_comm`` op): a
  C++ op that the first ``initialize`` compiles with g++, whose shared memory is set
  up once a process for the ranks of that moment. It serves only inference's all-reduce;
  training's collectives go through the group;
- whenever the worker forms a new group, has DeepSpeed forget the subgroups it cached (its
  clone of the world group, the data- and ZeRO-parallel ones), which it would otherwise hand
  the next run destroyed (``ValueError: Group ... is not registered``), and restarts ZeRO-3's
  numbering of modules and parameters: it counts on from the process's earlier engines, so a
  rank that ran ZeRO-3 before and a fresh one disagree (``RuntimeError: Detected a
  disagreement on list contents between rank0 and rank2``). Between two new groups every
  rank of a group runs the same tasks, so their counts agree, as in fresh processes.

And for the warm re-run: ZeRO-3's ``initialize`` runs a full ``gc.collect()``, which on a warm
worker walks every object of torch and DeepSpeed each time, so
the first import in a worker moves what is alive then (modules, classes,
functions: they live as long as the worker) out of the collector's reach (``gc.freeze()``),
as :mod:`raynb.train.huggingface.transformers` does for the Trainer's collection.

Nothing here imports DeepSpeed; outside a worker process nothing changes.
"""

from __future__ import annotations

import os
import sys

from ..cluster.worker import task_context
from . import library_imports

MODULE = "deepspeed"
SHM_OP = "deepspeed_shm_comm"
# What DeepSpeed caches in deepspeed.utils.groups, for a version without
# _release_process_group_references (the function DeepSpeed's own destroy_process_group calls).
_GROUP_GLOBALS = ("_WORLD_GROUP", "_ZERO_PARAM_INTRA_PARALLEL_GROUP", "_DATA_PARALLEL_GROUP", "mesh_device")
_GROUP_MAPS = ("_EXPERT_PARALLEL_GROUP", "_EXPERT_DATA_PARALLEL_GROUP", "_ALL_TO_ALL_GROUP")


def _run_on_gpu() -> bool | None:
    """Whether this worker's run uses GPUs: the running task says so; while its function is
    unpickled (a ``deepspeed`` imported at the top of a notebook or script is imported then,
    before the task starts) its group, formed already, does (NCCL: GPUs). None: unknown."""
    task = task_context.current()
    if task is not None:
        return bool(task.get("use_gpu")) and task.get("gpu_id") is not None
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_backend() == "nccl"
    return None


def choose_accelerator() -> None:
    """Set ``DS_ACCELERATOR`` from the run's device, unless set (before DeepSpeed's import)."""
    if os.environ.get("DS_ACCELERATOR"):
        return
    on_gpu = _run_on_gpu()
    if on_gpu is not None:
        os.environ["DS_ACCELERATOR"] = "cuda" if on_gpu else "cpu"


def forget_groups() -> None:
    """Drop the subgroups DeepSpeed cached: the group they belong to is being replaced."""
    groups = sys.modules.get("deepspeed.utils.groups")
    if groups is None:
        return
    release = getattr(groups, "_release_process_group_references", None)
    if release is not None:
        release(group=None)
        return
    for name in _GROUP_GLOBALS:
        if hasattr(groups, name):
            setattr(groups, name, None)
    for name in _GROUP_MAPS:
        getattr(groups, name, {}).clear()


def restart_zero3_numbering() -> None:
    """Number ZeRO-3's modules and parameters from 0 again, as in a fresh process."""
    offload = sys.modules.get("deepspeed.runtime.zero.parameter_offload")
    register = getattr(getattr(offload, "DeepSpeedZeRoOffload", None), "_register_deepspeed_module", None)
    defaults = getattr(register, "__defaults__", None) or ()
    if defaults and isinstance(defaults[-1], list) and defaults[-1]:
        defaults[-1][0] = 0  # its `count=[0]` default: the module counter
    init = getattr(sys.modules.get("deepspeed.runtime.zero.partition_parameters"), "Init", None)
    if init is not None and hasattr(init, "param_id"):
        init.param_id = 0


def new_group_coming() -> None:
    """The worker is about to form a new group: what DeepSpeed kept of the old one goes."""
    forget_groups()
    restart_zero3_numbering()


def fit_to_warm_ranks(deepspeed) -> None:
    """What a worker does once ``deepspeed`` is imported (see the module's docstring). Idempotent."""
    library_imports.freeze_imported_objects()
    ops = getattr(deepspeed, "ops", None)
    compatible = getattr(ops, "__compatible_ops__", None)
    if isinstance(compatible, dict):
        compatible[SHM_OP] = False
    task_context.before_new_group(new_group_coming)


def _before_import() -> None:
    if library_imports.in_worker():
        choose_accelerator()


def _after_import(module) -> None:
    if library_imports.in_worker():
        fit_to_warm_ranks(module)


def install() -> None:
    """Fit a ``deepspeed`` imported already, and any imported later, to a worker's warm
    ranks. Only a raynb worker process is changed (the hook is installed everywhere: the
    zygote installs it before it forks the workers). Idempotent."""
    library_imports.when_imported(MODULE, _after_import, before=_before_import)
