"""Ray Data's compute strategies (``compute=``, ``concurrency=``) and the Ray arguments a
transform accepts, as raynb reads them.

raynb runs a dataset's transforms lazily in the process that reads the rows: the
notebook (``take``, ``show``, ``iter_batches``, ``materialize``) or each rank of a run
(``get_dataset_shard``), in that reader's prefetch thread. A callable class given to a
transform is constructed once per reading process (an actor of Ray's pool is one such
process here) and called per batch. ``ActorPoolStrategy(size=N)`` / ``concurrency=N``
are checked as Ray checks them and then have no further effect: the parallelism is the
ranks'. To run a function over a whole dataset on N warm workers at once (batch
inference), pass ``map_batches(fn, num_workers=N)``.
"""
from __future__ import annotations

import sys

_NOTED: set = set()

# Ray's per-task resource arguments: a transform runs inside its reader, whose resources
# are the run's (ScalingConfig), so these are accepted and noted once.
NO_EFFECT = ("num_cpus", "num_gpus", "memory", "resources", "accelerator_type", "max_calls",
             "label_selector", "fallback_strategy", "runtime_env", "ray_remote_args_fn",
             "zero_copy_batch", "udf_modifying_row_count", "scheduling_strategy", "max_retries",
             "retry_exceptions", "num_returns")


class ComputeStrategy:
    """Base of Ray Data's compute strategies."""


class TaskPoolStrategy(ComputeStrategy):
    """Ray's task pool (``compute=TaskPoolStrategy(size=N)``): a function runs in the
    reading process.

    Raises:
        ValueError: ``size`` below 1.
    """

    def __init__(self, size: int | None = None):
        if size is not None and size < 1:
            raise ValueError(f"TaskPoolStrategy(size={size!r}): size must be >= 1")
        self.size = size

    def __repr__(self) -> str:
        return f"TaskPoolStrategy(size={self.size})"


class ActorPoolStrategy(ComputeStrategy):
    """Ray's actor pool (``compute=ActorPoolStrategy(size=N)`` or ``min_size=m,
    max_size=n``): a callable class is constructed once per reading process (the
    notebook, or each rank) and called per batch.

    Raises:
        ValueError: ``size`` with ``min_size`` / ``max_size`` / ``initial_size``; a size
            below 1; ``min_size`` above ``max_size``; ``initial_size`` outside them.
    """

    def __init__(self, *, size: int | None = None, min_size: int | None = None, max_size: int | None = None,
                 initial_size: int | None = None, max_tasks_in_flight_per_actor: int | None = None,
                 max_concurrent_calls_per_actor: int | None = None,
                 enable_true_multi_threading: bool | None = None):
        if size is not None:
            if size < 1:
                raise ValueError(f"ActorPoolStrategy(size={size!r}): size must be >= 1")
            if min_size is not None or max_size is not None or initial_size is not None:
                raise ValueError("ActorPoolStrategy: give size, or min_size / max_size / initial_size, not both")
            min_size = max_size = size
        min_size = 1 if min_size is None else min_size
        if min_size < 1:
            raise ValueError(f"ActorPoolStrategy(min_size={min_size!r}): min_size must be >= 1")
        if max_size is not None and max_size < min_size:
            raise ValueError(f"ActorPoolStrategy(min_size={min_size}, max_size={max_size}): min_size must be "
                             "<= max_size")
        if initial_size is not None and not (min_size <= initial_size <= (max_size or initial_size)):
            raise ValueError(f"ActorPoolStrategy(initial_size={initial_size}): must lie between min_size and "
                             "max_size")
        self.min_size, self.max_size, self.initial_size = min_size, max_size, initial_size or min_size
        self.max_tasks_in_flight_per_actor = max_tasks_in_flight_per_actor
        self.max_concurrent_calls_per_actor = max_concurrent_calls_per_actor

    def __repr__(self) -> str:
        return f"ActorPoolStrategy(min_size={self.min_size}, max_size={self.max_size})"


def check_compute(what: str, fn, compute, concurrency) -> None:
    """Check ``compute`` / ``concurrency`` as Ray does for ``what``.

    Raises:
        TypeError: ``compute`` is not a strategy (or "tasks" / "actors"); ``concurrency``
            not an int or a tuple of 2-3 ints.
        ValueError: a callable class with a task pool; both ``compute`` and ``concurrency``.
    """
    if compute is not None and concurrency is not None:
        raise ValueError(f"{what}: give compute= or concurrency=, not both (concurrency is Ray's newer form)")
    if compute is not None and not isinstance(compute, (ComputeStrategy, str)):
        raise TypeError(f"{what}(compute={compute!r}): give raynb.data.ActorPoolStrategy(...) or "
                        "TaskPoolStrategy(...)")
    if isinstance(compute, str) and compute not in ("tasks", "actors"):
        raise ValueError(f"{what}(compute={compute!r}): use 'tasks', 'actors' or a strategy object")
    if concurrency is not None:
        ok = isinstance(concurrency, int) and concurrency >= 1 or (
            isinstance(concurrency, tuple) and len(concurrency) in (2, 3)
            and all(isinstance(c, int) and c >= 1 for c in concurrency))
        if not ok or isinstance(concurrency, bool):
            raise TypeError(f"{what}(concurrency={concurrency!r}): give an int >= 1, or (min, max) / "
                            "(min, max, initial) ints")
    if isinstance(fn, type) and isinstance(compute, TaskPoolStrategy):
        raise ValueError(f"{what}({fn.__name__}): a callable class runs in an actor pool; pass "
                         "compute=ActorPoolStrategy(...) or concurrency=N")


def check_remote_args(what: str, kwargs: dict) -> None:
    """Accept Ray's resource arguments (noted once each: they have no effect here) and
    refuse any other keyword.

    Raises:
        TypeError: an argument Ray's ``what`` does not take either (named).
    """
    unknown = sorted(k for k in kwargs if k not in NO_EFFECT)
    if unknown:
        raise TypeError(f"{what}() got unexpected arguments {unknown}; see docs/data.md for what raynb's "
                        "Dataset takes")
    for k in kwargs:
        note_once(f"raynb.data: {what}({k}=...) has no effect: a transform runs inside the process that "
                  "reads the rows, with that run's resources (ScalingConfig)")


def note_once(line: str) -> None:
    """Print ``line`` to stderr the first time it is seen in this process."""
    if line not in _NOTED:
        _NOTED.add(line)
        print(line, file=sys.stderr)
