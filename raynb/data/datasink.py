"""``Datasink`` (Ray's custom-sink interface) and ``write_datasink``: a dataset's rows
handed to a user's sink in write tasks, run one after the other in the process that
calls ``Dataset.write_datasink`` (the notebook), each given its rows as pyarrow Tables.

The callbacks run as Ray calls them: ``on_write_start(schema)`` before the first
``write``, ``on_write_complete(WriteResult)`` after the last, ``on_write_failed(error)``
when a write (or the completion) raises, and the error is raised again."""

from __future__ import annotations

import logging
import numbers
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Generic, Iterable, List, Optional, TypeVar

from . import block as block_ops
from .write import rows_per_block

WriteReturnType = TypeVar("WriteReturnType")
logger = logging.getLogger(__name__)


@dataclass
class WriteResult(Generic[WriteReturnType]):
    """What the write tasks did, given to ``on_write_complete`` (Ray's ``WriteResult``).

    Attributes:
        num_rows (int): rows written, all tasks together.
        size_bytes (int): their size in memory.
        write_returns (list): each ``write`` call's return value, in task order.
    """

    num_rows: int
    size_bytes: int
    write_returns: List[Any]


@dataclass
class TaskContext:
    """A write task's context (the fields of Ray's ``TaskContext`` a sink reads).

    Attributes:
        task_idx (int): the task's index, from 0.
        op_name (str): ``"Write"``.
        kwargs (dict): ``{"write_uuid": ...}``: one id for the whole write.
    """

    task_idx: int
    op_name: str = "Write"
    kwargs: Dict[str, Any] = field(default_factory=dict)


class Datasink(Generic[WriteReturnType]):
    """A custom destination for rows (Ray's ``Datasink``): subclass it, implement
    :meth:`write`, and call ``dataset.write_datasink(MySink(...))``."""

    def on_write_start(self, schema=None) -> None:
        """Called once before the first write, with the rows' ``pyarrow.Schema``."""

    def write(self, blocks: Iterable, ctx: TaskContext) -> WriteReturnType:
        """Write one task's blocks (``pyarrow.Table``s); the return value is collected
        into the ``WriteResult``."""
        raise NotImplementedError

    def on_write_complete(self, write_result: WriteResult) -> None:
        """Called once after every write task succeeded."""

    def on_write_failed(self, error: Exception) -> None:
        """Called with the first error when a write fails."""

    def get_name(self) -> str:
        name = type(self).__name__.lstrip("_")
        return name[: -len("Datasink")] if name.endswith("Datasink") and name != "Datasink" else name

    @property
    def supports_distributed_writes(self) -> bool:
        return True

    @property
    def min_rows_per_write(self) -> Optional[int]:
        """Rows to give each ``write`` call (None: the dataset's blocks, else one task)."""
        return None

    @property
    def min_bytes_per_write(self) -> Optional[int]:
        return None


def _task_tables(dataset, rows_per_task: Optional[int]):
    """The write tasks' inputs: a pyarrow Table per task (all rows in one when
    ``rows_per_task`` is None)."""
    import pyarrow as pa

    if rows_per_task is not None:
        for batch in dataset.iter_batches(batch_size=rows_per_task, prefetch_batches=1):
            yield block_ops.batch_to_table(batch)
        return
    tables = [block_ops.batch_to_table(b) for b in dataset.iter_batches(batch_size=None, prefetch_batches=1)]
    if tables:
        yield pa.concat_tables(tables, promote_options="default")


def write_datasink(dataset, datasink: Datasink, *, ray_remote_args=None, concurrency=None) -> None:
    """Write every row of ``dataset`` to ``datasink`` (``Dataset.write_datasink``): one
    write task per block of a ``repartition(n)``'d dataset, else per
    ``datasink.min_rows_per_write`` rows, else one task for all rows.

    Raises:
        TypeError: ``datasink`` is not a ``Datasink``.
        Exception: what the sink's ``write`` or ``on_write_complete`` raised, after
            ``on_write_failed`` saw it.
    """
    if not isinstance(datasink, Datasink):
        raise TypeError(f"write_datasink() takes a raynb.data.Datasink, got {type(datasink).__name__}")
    rows_per_task = datasink.min_rows_per_write
    if rows_per_task is not None and (
        isinstance(rows_per_task, bool)
        or not isinstance(rows_per_task, numbers.Integral)
        or rows_per_task < 1
    ):
        raise ValueError(
            f"{type(datasink).__name__}.min_rows_per_write is {rows_per_task!r}: give a number of "
            "rows >= 1, or None for one write task per block"
        )
    if rows_per_task is None:
        rows_per_task = rows_per_block(dataset)
    write_uuid, returns, rows, size = uuid.uuid4().hex, [], 0, 0
    started = False
    try:
        for idx, table in enumerate(_task_tables(dataset, rows_per_task)):
            if not started:
                datasink.on_write_start(table.schema)
                started = True
            ctx = TaskContext(task_idx=idx, kwargs={"write_uuid": write_uuid})
            returns.append(datasink.write([table], ctx))
            rows, size = rows + table.num_rows, size + int(table.nbytes)
        if not started:
            datasink.on_write_start(None)
        datasink.on_write_complete(WriteResult(rows, size, returns))
    except Exception as e:
        _tell_failed(datasink, e)
        raise


def _tell_failed(datasink: Datasink, error: Exception) -> None:
    """``on_write_failed(error)``; what it raises is logged, so the write's own error
    (what the user must see) is the one raised."""
    try:
        datasink.on_write_failed(error)
    except Exception:
        logger.exception(
            "%s.on_write_failed() raised while handling the write's error %r (raised below)",
            type(datasink).__name__,
            error,
        )


__all__ = ["Datasink", "TaskContext", "WriteResult", "WriteReturnType", "write_datasink"]
