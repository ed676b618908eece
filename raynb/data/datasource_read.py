"""``read_datasource``: a user's ``Datasource`` as a raynb dataset.

``get_read_tasks(parallelism)`` runs once, where the dataset is made; the read tasks
(pickled with the dataset) are the units a rank is given, as parquet row groups are:
each rank runs only the tasks that hold its rows, on the rank, in its prefetch thread,
and keeps just its rows of them. A task whose metadata does not say how many rows it
yields is run once here to count them."""

from __future__ import annotations

import math
import numbers
import os

from . import block as block_ops
from . import sharding
from .block_accessor import as_table
from .dataset import Dataset
from .sources import Schema, _type_name


def _parallelism(datasource, parallelism: int, override_num_blocks) -> int:
    """Ray's choice of read tasks: the asked number, else the context's minimum (200),
    at least two per CPU, kept between the in-memory size / target_max_block_size and
    size / target_min_block_size when the source knows its size."""
    from .context import DataContext

    if override_num_blocks is not None:
        return max(1, int(override_num_blocks))
    if parallelism is not None and parallelism > 0:
        return int(parallelism)
    ctx = DataContext.get_current()
    try:
        size = datasource.estimate_inmemory_data_size()
    except NotImplementedError:
        size = None
    p = max(ctx.read_op_min_num_blocks, 2 * (os.cpu_count() or 1))
    if isinstance(size, (int, float)) and math.isfinite(size) and size >= 0:
        if ctx.target_max_block_size:
            p = max(p, int(size / ctx.target_max_block_size))
        p = min(p, max(1, int(size / ctx.target_min_block_size)))
    return max(1, p)


def _read_tasks(datasource, parallelism: int, read_args: dict) -> list:
    from .read_task import Datasource

    if not isinstance(datasource, Datasource) and not hasattr(datasource, "get_read_tasks"):
        raise TypeError(f"read_datasource() takes a raynb.data.Datasource, got {type(datasource).__name__}")
    if getattr(datasource, "should_create_reader", False):
        tasks = datasource.create_reader(**read_args).get_read_tasks(parallelism)
    else:
        tasks = datasource.get_read_tasks(parallelism)
    name = type(datasource).__name__
    if tasks is None or not hasattr(tasks, "__iter__"):
        raise TypeError(f"{name}.get_read_tasks() returned {type(tasks).__name__}; return a list of ReadTask")
    tasks = list(tasks)
    for i, t in enumerate(tasks):
        if not (callable(t) and hasattr(t, "metadata")):
            raise TypeError(
                f"{name}.get_read_tasks()[{i}] is a {type(t).__name__}, not a ReadTask; "
                "wrap the read function: ReadTask(read_fn, BlockMetadata(num_rows=...))"
            )
    return tasks


def _count(task, i: int, name: str) -> int:
    """Task ``i``'s rows: its metadata's ``num_rows``, else counted by running it here."""
    n = getattr(task.metadata, "num_rows", None) if task.metadata is not None else None
    if n is None:
        return sum(block_ops.num_rows(b) for b in _numpy_blocks(task))
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(
            f"{name}: read task {i}'s BlockMetadata(num_rows={n!r}) is not a row count; "
            "give the rows it yields (an int >= 0), or None to have them counted"
        )
    return int(n)


def _numpy_blocks(task):
    """A read task's blocks as numpy batches."""
    for blk in task():
        table = as_table(blk)
        if table.num_rows:
            yield block_ops.table_to_numpy(table)


class DatasourceSource:
    """A ``Datasource``'s read tasks and their row counts (see the module's docstring)."""

    nbytes = 0  # read where consumed, not held in shared memory

    def __init__(self, name: str, tasks: list, counts: list, schema=None):
        self.name, self.tasks, self.counts, self._schema = name, list(tasks), list(counts), schema

    def __reduce__(self):
        return DatasourceSource, (self.name, self.tasks, self.counts, self._schema)

    def num_rows(self) -> int:
        return sum(self.counts)

    def schema(self) -> Schema:
        if self._schema is None and self.tasks and hasattr(self.tasks[0].schema, "types"):
            given = self.tasks[0].schema
            self._schema = Schema(list(given.names), [str(t) for t in given.types])
        if self._schema is None:
            first = next((i for i, c in enumerate(self.counts) if c), None)
            batch = next(_numpy_blocks(self.tasks[first]), None) if first is not None else None
            cols = batch or {}
            self._schema = Schema(list(cols), [_type_name(a) for a in cols.values()])
        return self._schema

    def _read_unit(self, unit: int, first: int, end: int, chunk: int):
        """Rows ``[first, end)`` of read task ``unit``, ``chunk`` rows a batch at most.

        Raises:
            ValueError: the task yielded fewer rows than its metadata said.
        """
        pos, blocks = 0, _numpy_blocks(self.tasks[unit])
        for batch in blocks:
            n = block_ops.num_rows(batch)
            lo, hi = max(first - pos, 0), min(end - pos, n)
            pos += n
            for s in range(lo, hi, chunk):
                yield block_ops.take_rows(batch, slice(s, min(s + chunk, hi)))
            if pos >= end:
                break
        # The piece that ends the task sees whether it yields more rows than said: they
        # would be lost without a word.
        if end == self.counts[unit] and pos >= end:
            pos += sum(block_ops.num_rows(b) for b in blocks)
        if pos != end and (pos < end or end == self.counts[unit]):
            raise ValueError(
                f"{self.name}: read task {unit} yielded {pos} rows, but its metadata said "
                f"{self.counts[unit]}; give BlockMetadata(num_rows=...) the rows it yields, or None"
            )

    def rank_stream(self, world_size: int, rank: int, seed, epoch: int, pad: bool, chunk: int):
        """This rank's rows of the epoch: its pieces of the (shuffled) read tasks."""
        order = sharding.epoch_order(len(self.tasks), seed, epoch)
        for unit, first, end in sharding.rank_pieces(self.counts, world_size, rank, order, pad):
            yield from self._read_unit(unit, first, end, chunk)


def read_datasource(
    datasource,
    *,
    parallelism: int = -1,
    num_cpus=None,
    num_gpus=None,
    memory=None,
    ray_remote_args=None,
    concurrency=None,
    override_num_blocks=None,
    **read_args,
) -> Dataset:
    """A dataset of a custom ``Datasource`` (Ray's ``read_datasource``).

    Args:
        datasource (Datasource): the user's source; ``get_read_tasks(parallelism)`` is
            called here, once.
        parallelism, override_num_blocks (int): the read tasks to ask for (Ray's default
            otherwise: see ``_parallelism``).
        num_cpus, num_gpus, memory, ray_remote_args, concurrency: Ray's task resources;
            no effect here (a rank reads its own tasks).
        **read_args: given to a legacy ``create_reader`` / ``prepare_read`` source.

    Raises:
        TypeError: not a Datasource.
        ValueError: no read tasks, or a task's rows differ from its metadata (on reading).
    """
    p = _parallelism(datasource, parallelism, override_num_blocks)
    tasks = _read_tasks(datasource, p, read_args)
    name = datasource.get_name() if hasattr(datasource, "get_name") else type(datasource).__name__
    counts = [_count(t, i, name) for i, t in enumerate(tasks)]
    return Dataset(DatasourceSource(name, tasks, counts))


__all__ = ["DatasourceSource", "read_datasource"]
