"""``prepare_model(parallel_strategy="fsdp")``: shard a model's parameters over the ranks.

With torch's FSDP2 (``torch.distributed.fsdp.fully_shard``, torch >= 2.6) each
parameter becomes a ``DTensor`` split along its first dimension, so on N ranks each holds
about 1/N of every parameter; the units given in ``modules`` (by default the model's
direct children that hold parameters) gather their parameters for their own forward and
backward only, and the root takes the rest. Older torch falls back to FSDP1
(``FullyShardedDataParallel``), given the kwargs as they are.

A sharded checkpoint: every rank saves its part with ``torch.distributed.checkpoint``
into its own directory and reports it; raynb merges the ranks' files into one
checkpoint (``__<rank>_0.distcp`` files and rank 0's ``.metadata``), which
``torch.distributed.checkpoint.load`` reads back on any number of ranks.
"""
from __future__ import annotations

FSDP2_OPTIONS = ("mesh", "reshard_after_forward", "shard_placement_fn", "mp_policy", "offload_policy",
                 "ignored_params")


def _units(model, modules):
    """The submodules to shard as their own units, in post-order (innermost first)."""
    if modules is None:
        return [m for m in model.children() if any(True for _ in m.parameters())]
    classes = tuple(modules)
    if not all(isinstance(c, type) for c in classes):
        raise TypeError("parallel_strategy_kwargs['modules'] takes module classes (e.g. "
                        f"[nn.TransformerEncoderLayer]), got {modules!r}")
    return [m for m in model.modules() if isinstance(m, classes) and m is not model]


def _broadcast_from_rank0(model) -> None:
    """Rank 0's parameters and buffers on every rank, as DDP does: each rank then keeps its
    chunk of the same tensors (``fully_shard`` itself syncs nothing)."""
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(t.data, src=0)


def shard_model(model, device, kwargs: dict | None):
    """Shard ``model`` over the run's group (what ``prepare_model`` does for "fsdp").

    Args:
        model (torch.nn.Module): on ``device`` already, the same on every rank.
        device (torch.device): this rank's device.
        kwargs (dict | None): ``fully_shard``'s options (``reshard_after_forward``,
            ``mp_policy``, ``offload_policy``, ``mesh``, ...) and raynb's ``modules``
            (module classes to shard as units); FSDP1's constructor arguments on a torch
            without FSDP2.

    Every rank starts from rank 0's parameters (broadcast before sharding).

    Returns:
        The model, its parameters sharded (FSDP2: the same object, now an ``FSDPModule``).

    Raises:
        TypeError: an option ``fully_shard`` does not take (named, with those it takes).
    """
    kwargs = dict(kwargs or {})
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6: FSDP1
        from torch.distributed.fsdp import FullyShardedDataParallel

        if device.type == "cuda":
            kwargs.setdefault("device_id", device)
        return FullyShardedDataParallel(model, **kwargs)
    modules = kwargs.pop("modules", None)
    unknown = sorted(set(kwargs) - set(FSDP2_OPTIONS))
    if unknown:
        raise TypeError(f"prepare_model(parallel_strategy='fsdp'): parallel_strategy_kwargs {unknown} are "
                        f"not options of fully_shard; it takes {list(FSDP2_OPTIONS)} and raynb's 'modules'")
    if "mesh" not in kwargs:
        from torch.distributed.device_mesh import init_device_mesh
        import torch.distributed as dist

        kwargs["mesh"] = init_device_mesh(device.type, (dist.get_world_size(),))
    _broadcast_from_rank0(model)
    for unit in _units(model, modules):
        fully_shard(unit, **kwargs)
    fully_shard(model, **kwargs)
    return model
