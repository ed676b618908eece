"""Horovod's PyTorch API (``horovod.torch``) served over raynb's torch.distributed group.

Inside a ``HorovodTrainer`` function ``import horovod.torch as hvd`` gives this module
when the real Horovod is not installed (Horovod 0.28 does not build against current
torch): ``hvd.init()``, ``rank()``, ``local_rank()``, ``size()``, ``local_size()``,
``DistributedOptimizer``, ``broadcast_parameters``, ``broadcast_optimizer_state``,
``allreduce``, ``allgather``, ``broadcast`` and their in-place / async forms run on the
run's process group, which raynb formed before the function started.

Differences from Horovod: collectives are matched by call order, not by ``name`` (every
rank must call them in the same order); ``hvd.Adasum``, process sets other than the global
one, ``hvd.join`` and elastic training are not served; ``broadcast_object`` /
``allgather_object`` take JSON-able objects only (no pickles between ranks).
"""
from __future__ import annotations

from ... import session as _session
from .collectives import (Adasum, Average, HorovodInternalError, Max, Min, Product, Sum, allgather,
                          allgather_object, allreduce, allreduce_, allreduce_async, allreduce_async_,
                          broadcast, broadcast_, broadcast_object, grouped_allreduce, poll, synchronize)
from .compression import Compression
from .optimizer import DistributedOptimizer, broadcast_optimizer_state, broadcast_parameters

_initialized = [False]


def init(comm=None, process_sets=None) -> None:
    """Join the run's group (already formed by raynb).

    Raises:
        RuntimeError: called outside a training function.
    """
    import torch.distributed as dist

    task = _session._require("hvd.init")
    if task["world_size"] > 1 and not dist.is_initialized():
        raise RuntimeError("hvd.init(): this run has no process group; run it in a HorovodTrainer")
    _initialized[0] = True


def shutdown() -> None:
    """Leave Horovod (the group itself is raynb's and stays)."""
    _initialized[0] = False


def is_initialized() -> bool:
    return _initialized[0]


def _ctx():
    if not _initialized[0]:
        raise ValueError("Horovod has not been initialized; run hvd.init() first")
    return _session.get_context()


def rank() -> int:
    """This process's rank among all of the run's."""
    return _ctx().get_world_rank()


def size() -> int:
    """The number of processes in the run."""
    return _ctx().get_world_size()


def local_rank() -> int:
    """This process's rank among the run's on its node."""
    return _ctx().get_local_rank()


def local_size() -> int:
    """The number of the run's processes on this node."""
    return _ctx().get_local_world_size()


def cross_rank() -> int:
    """This node's index among the run's nodes."""
    return _ctx().get_node_rank()


def cross_size() -> int:
    """The number of nodes the run spans (homogeneous nodes assumed)."""
    ctx = _ctx()
    return max(1, ctx.get_world_size() // max(1, ctx.get_local_world_size()))


def is_homogeneous() -> bool:
    return True


def mpi_threads_supported() -> bool:
    return False


def mpi_enabled() -> bool:
    return False


def mpi_built() -> bool:
    return False


def gloo_enabled() -> bool:
    return True


def gloo_built() -> bool:
    return True


def nccl_built() -> int:
    return 0


__all__ = ["init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "cross_rank",
           "cross_size", "DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state",
           "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
           "allgather", "allgather_object", "broadcast", "broadcast_", "broadcast_object", "synchronize",
           "poll", "Compression", "Average", "Sum", "Adasum", "Min", "Max", "Product", "HorovodInternalError"]
