"""Horovod's ``DistributedOptimizer``, ``broadcast_parameters`` and
``broadcast_optimizer_state`` over raynb's torch.distributed group.

As Horovod's: each parameter's gradient is allreduced (averaged by default) as soon as it
has been accumulated ``backward_passes_per_step`` times (a hook per parameter, so the
communication overlaps the rest of the backward pass); ``step()`` waits for them, then
steps the wrapped optimizer. The gradients are not divided by ``backward_passes_per_step``
(Horovod does not either: scale the loss).
"""
from __future__ import annotations

import contextlib

from .collectives import Average, _reduce_op, allreduce_async_, broadcast_, synchronize
from .compression import Compression


class _DistributedOptimizer:
    """Methods mixed into a subclass of the user's optimizer class (as Horovod does)."""

    def _hvd_setup(self, named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor):
        _reduce_op(op, None)  # names a bad op now, not at the first step
        params = [p for group in self.param_groups for p in group["params"]]
        names = dict((id(p), n) for n, p in named_parameters) if named_parameters else {}
        self._hvd_names = {p: names.get(id(p), f"param.{i}") for i, p in enumerate(params)}
        self._hvd_compression, self._hvd_op = compression, op
        self._hvd_passes = backward_passes_per_step
        self._hvd_predivide = gradient_predivide_factor
        self._hvd_counts = {p: 0 for p in params}
        self._hvd_handles: dict = {}
        self._hvd_synchronized = False
        self._hvd_hooks = [p.register_post_accumulate_grad_hook(self._hvd_hook)
                           for p in params if p.requires_grad]

    def _hvd_start(self, p):
        scale = 1.0 / self._hvd_predivide if self._hvd_op == Average else 1.0
        return allreduce_async_(p.grad, op=self._hvd_op, prescale_factor=scale,
                                postscale_factor=self._hvd_predivide if self._hvd_op == Average else 1.0,
                                compression=self._hvd_compression)

    def _hvd_hook(self, p):
        if p in self._hvd_handles:
            raise AssertionError("Gradients were computed more than backward_passes_per_step times before "
                                 "optimizer.step() or synchronize(); raise backward_passes_per_step")
        self._hvd_counts[p] += 1
        if self._hvd_counts[p] == self._hvd_passes:
            self._hvd_handles[p] = self._hvd_start(p)

    def synchronize(self):
        """Wait for every gradient's allreduce (a parameter whose hook did not fire, unused
        in this backward pass, is reduced now with a zero gradient, as on the other ranks)."""
        import torch

        for p in self._hvd_counts:
            if p.requires_grad and p not in self._hvd_handles:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                self._hvd_handles[p] = self._hvd_start(p)
        for p, handle in list(self._hvd_handles.items()):
            synchronize(handle)
        self._hvd_handles.clear()
        self._hvd_counts = dict.fromkeys(self._hvd_counts, 0)
        self._hvd_synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """``step()`` inside does not synchronize (after an explicit ``synchronize()``)."""
        self._hvd_skip = True
        try:
            yield
        finally:
            self._hvd_skip = False

    def step(self, closure=None):
        if not getattr(self, "_hvd_skip", False) and not self._hvd_synchronized:
            self.synchronize()
        self._hvd_synchronized = False
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._hvd_handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize()")
        return super().zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         groups=None, sparse_as_dense=False, process_set=None):
    """Wrap ``optimizer`` so its gradients are reduced over the ranks before each step
    (``horovod.torch.DistributedOptimizer``).

    Args:
        optimizer (torch.optim.Optimizer): built on the model's parameters.
        named_parameters: ``model.named_parameters()`` (names only label parameters).
        compression: ``hvd.Compression.none`` or ``hvd.Compression.fp16``.
        backward_passes_per_step (int): local accumulations before each allreduce.
        op: ``hvd.Average`` (default) or ``hvd.Sum``.
        gradient_predivide_factor (float): with Average, divide by it before the sum and
            multiply after (Horovod's split of the averaging).
        groups, sparse_as_dense, process_set: accepted for Horovod's signature; gradients
            are reduced one tensor each, densely, over all ranks.

    Returns:
        An optimizer of a subclass of ``optimizer``'s class, sharing its state.

    Raises:
        ValueError: ``backward_passes_per_step < 1`` or an op other than those named.
    """
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step={backward_passes_per_step!r}: give an integer >= 1")
    cls = type(optimizer.__class__.__name__, (_DistributedOptimizer, optimizer.__class__), {})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)  # the same param_groups and state objects
    wrapped._hvd_setup(list(named_parameters or []), compression, backward_passes_per_step, op,
                       gradient_predivide_factor)
    return wrapped


def broadcast_parameters(params, root_rank):
    """Rank ``root_rank``'s parameters on every rank, in place.

    Args:
        params: ``model.state_dict()``, ``model.named_parameters()`` or a list of
            ``(name, tensor)`` pairs (taken in sorted-name order when a dict).
    """
    items = sorted(params.items()) if isinstance(params, dict) else list(params)
    import torch

    with torch.no_grad():
        for _, p in items:
            if isinstance(p, torch.Tensor):
                broadcast_(p.data if hasattr(p, "data") else p, root_rank)


def broadcast_optimizer_state(optimizer, root_rank):
    """Rank ``root_rank``'s optimizer state (its tensors and its numeric options: ``lr``,
    ``momentum``, step counts) on every rank, in place. An optimizer that has not stepped
    yet gets its state made first by a step with zero gradients, as Horovod does."""
    import torch

    if not optimizer.state:
        saved = [(p, p.grad) for g in optimizer.param_groups for p in g["params"]]
        for p, _ in saved:
            p.grad = torch.zeros_like(p)
        # The wrapped class's own step: no allreduce of these zeros.
        step = super(_DistributedOptimizer, optimizer).step if isinstance(optimizer, _DistributedOptimizer) \
            else optimizer.step
        step()
        for p, g in saved:
            p.grad = g
    for group in optimizer.param_groups:
        for key in sorted(k for k, v in group.items() if k != "params"):
            value = group[key]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                t = broadcast_(torch.tensor([float(value)], dtype=torch.float64), root_rank)
                group[key] = type(value)(t.item())
        for p in group["params"]:
            for key, value in sorted(optimizer.state.get(p, {}).items()):
                if isinstance(value, torch.Tensor):
                    broadcast_(value, root_rank)
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    t = broadcast_(torch.tensor([float(value)], dtype=torch.float64), root_rank)
                    optimizer.state[p][key] = type(value)(t.item())
