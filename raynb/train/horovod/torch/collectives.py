"""Horovod's PyTorch collectives (``horovod.torch``) over raynb's torch.distributed group.

Horovod matches operations across ranks by name, in any order; here they run in the order
each rank calls them (as torch.distributed's), so every rank must call the same collectives
in the same order, which Horovod's examples do. ``name`` is accepted and unused.
"""
from __future__ import annotations

import json

from .compression import Compression

# Reduction ops, as Horovod's constants.
Average, Sum, Adasum, Min, Max, Product = "Average", "Sum", "Adasum", "Min", "Max", "Product"


class HorovodInternalError(RuntimeError):
    """An operation Horovod has that is not served over torch.distributed."""


def _dist():
    import torch.distributed as dist

    if not dist.is_initialized():
        raise ValueError("Horovod has not been initialized; run hvd.init() inside a HorovodTrainer "
                         "(or TorchTrainer) training function")
    return dist


def _reduce_op(op, average):
    if average is not None and op is not None:
        raise ValueError("hvd.allreduce: give op= or the deprecated average=, not both")
    if op is None:
        op = Sum if average is False else Average
    if op == Adasum:
        raise HorovodInternalError("hvd.Adasum is not served by raynb's Horovod API; use hvd.Average")
    dist = _dist()
    table = {Average: dist.ReduceOp.SUM, Sum: dist.ReduceOp.SUM, Min: dist.ReduceOp.MIN,
             Max: dist.ReduceOp.MAX, Product: dist.ReduceOp.PRODUCT}
    if op not in table:
        raise ValueError(f"hvd.allreduce(op={op!r}): use hvd.Average, hvd.Sum, hvd.Min, hvd.Max or hvd.Product")
    return op, table[op]


class Handle:
    """An asynchronous operation (``allreduce_async`` and friends): ``synchronize(handle)``."""

    def __init__(self, work, finish):
        self.work, self.finish = work, finish

    def wait(self):
        if self.work is not None:
            self.work.wait()
            self.work = None
        return self.finish()


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=None, compression=Compression.none):
    """Start an in-place allreduce of ``tensor``; ``synchronize(handle)`` returns it reduced."""
    op, torch_op = _reduce_op(op, average)
    dist = _dist()
    sent, ctx = compression.compress(tensor)
    if sent is tensor:
        sent = tensor if tensor.is_contiguous() else tensor.contiguous()
    if prescale_factor != 1.0:
        sent.mul_(prescale_factor)
    work = dist.all_reduce(sent, op=torch_op, async_op=True)

    def finish():
        out = compression.decompress(sent, ctx)
        scale = postscale_factor / dist.get_world_size() if op == Average else postscale_factor
        if scale != 1.0:
            out = out.mul_(scale) if out.dtype.is_floating_point else out.div_(int(1 / scale), rounding_mode="floor")
        if out is not tensor:
            tensor.copy_(out)
        return tensor

    return Handle(work, finish)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=None, compression=Compression.none):
    """As :func:`allreduce_async_`, on a copy (``tensor`` is left as it is)."""
    return allreduce_async_(tensor.detach().clone(), average, name, op, prescale_factor, postscale_factor,
                            process_set, compression)


def synchronize(handle):
    """Wait for an asynchronous operation; its result."""
    return handle.wait()


def poll(handle) -> bool:
    """True when the operation finished (``synchronize`` will not block)."""
    return handle.work is None or handle.work.is_completed()


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """``tensor`` reduced over every rank (averaged by default), a new tensor."""
    return synchronize(allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor,
                                       process_set, compression))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=None):
    """``tensor`` reduced over every rank, in place."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                                        process_set))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Each of ``tensors`` reduced over every rank (new tensors)."""
    handles = [allreduce_async(t, average, name, op, prescale_factor, postscale_factor, process_set,
                               compression) for t in tensors]
    return [synchronize(h) for h in handles]


def allgather(tensor, name=None, process_set=None):
    """Every rank's ``tensor`` concatenated along dimension 0, in rank order (their first
    dimensions may differ; the others must match)."""
    import torch

    dist = _dist()
    world = dist.get_world_size()
    rows = torch.tensor([tensor.shape[0] if tensor.dim() else 1], dtype=torch.int64, device=tensor.device)
    every_rows = [torch.empty_like(rows) for _ in range(world)]
    dist.all_gather(every_rows, rows)
    counts = [int(r.item()) for r in every_rows]
    flat = tensor.reshape(-1, *tensor.shape[1:]) if tensor.dim() else tensor.reshape(1)
    padded = torch.zeros((max(counts), *flat.shape[1:]), dtype=flat.dtype, device=flat.device)
    padded[:flat.shape[0]] = flat
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded.contiguous())
    return torch.cat([p[:n] for p, n in zip(parts, counts)])


def broadcast_(tensor, root_rank, name=None, process_set=None):
    """``tensor`` replaced by rank ``root_rank``'s, in place."""
    _dist().broadcast(tensor, src=root_rank)
    return tensor


def broadcast(tensor, root_rank, name=None, process_set=None):
    """Rank ``root_rank``'s ``tensor``, a new tensor on every rank."""
    return broadcast_(tensor.detach().clone().contiguous(), root_rank, name)


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """Rank ``root_rank``'s ``obj`` on every rank. Served for JSON-able objects only (sent as
    JSON, never unpickled: Horovod pickles them).

    Raises:
        TypeError: ``obj`` is not JSON-able (on the root).
    """
    import torch

    dist = _dist()
    rank = dist.get_rank()
    data = b""
    if rank == root_rank:
        try:
            data = json.dumps(obj).encode()
        except TypeError as e:
            raise TypeError(f"hvd.broadcast_object: raynb's Horovod API sends JSON-able objects only "
                            f"(no pickles between ranks): {e}") from None
    size = torch.tensor([len(data)], dtype=torch.int64)
    dist.broadcast(size, src=root_rank)
    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8) if rank == root_rank else \
        torch.empty(int(size.item()), dtype=torch.uint8)
    dist.broadcast(buf, src=root_rank)
    return obj if rank == root_rank else json.loads(bytes(buf.tolist()).decode())


def allgather_object(obj, name=None, process_set=None):
    """Every rank's JSON-able ``obj``, a list in rank order."""
    import torch

    data = torch.frombuffer(bytearray(json.dumps(obj).encode()), dtype=torch.uint8)
    every = allgather(data)
    sizes = allgather(torch.tensor([len(data)], dtype=torch.int64))
    out, at = [], 0
    for n in sizes.tolist():
        out.append(json.loads(bytes(every[at:at + n].tolist()).decode()))
        at += n
    return out
