"""Ray Data's custom-source interface: ``Datasource`` and its ``ReadTask``s (and Ray's
older ``Reader``), read with ``raynb.data.read_datasource`` (``datasource_read``).

A user's subclass from Ray's docs runs unchanged: ``get_read_tasks(parallelism)`` is
called once in the process that builds the dataset (the notebook), and each rank of a
run calls only the read tasks that hold its rows."""

from __future__ import annotations

from typing import Callable, Iterable, List, Optional

from .block_accessor import BlockMetadata


class ReadTask:
    """One piece of a read: a function returning an iterable of blocks (pyarrow Tables or
    pandas DataFrames), and what is known of them before it runs (Ray's ``ReadTask``).

    Args:
        read_fn (() -> Iterable[Block]): reads the rows; runs where the rows are read
            (a rank of a run, or the notebook), so it and what it holds must pickle.
        metadata (BlockMetadata): ``num_rows`` lets ranks read only their tasks;
            None makes raynb read the task once when the dataset is made, to count.
        schema: the ``pyarrow.Schema`` of the blocks, if known.
        per_task_row_limit (int | None): at most this many rows are taken from the task.
    """

    def __init__(
        self,
        read_fn: Callable[[], Iterable],
        metadata: BlockMetadata,
        schema=None,
        per_task_row_limit: Optional[int] = None,
    ):
        self._read_fn, self._metadata = read_fn, metadata
        self._schema, self._per_task_row_limit = schema, per_task_row_limit

    @property
    def metadata(self) -> BlockMetadata:
        return self._metadata

    @property
    def schema(self):
        return self._schema

    @property
    def read_fn(self) -> Callable[[], Iterable]:
        return self._read_fn

    @property
    def per_task_row_limit(self) -> Optional[int]:
        return self._per_task_row_limit

    def __call__(self) -> Iterable:
        """The task's blocks, cut at ``per_task_row_limit`` rows."""
        from .block_accessor import BlockAccessor

        result = self._read_fn()
        if not hasattr(result, "__iter__"):
            raise TypeError(
                f"a ReadTask's read_fn returned {type(result).__name__}; return a list (or an "
                "iterator) of blocks, e.g. [table]"
            )
        left = self._per_task_row_limit
        for blk in result:
            if left is None:
                yield blk
                continue
            acc = BlockAccessor.for_block(blk)
            if acc.num_rows() >= left:
                yield acc.slice(0, left)
                return
            left -= acc.num_rows()
            yield blk


class Datasource:
    """A custom source of rows (Ray's ``Datasource``): subclass it, implement
    :meth:`get_read_tasks` and :meth:`estimate_inmemory_data_size`, and read it with
    ``raynb.data.read_datasource(MyDatasource(...))``."""

    def __init__(self):
        pass

    def get_name(self) -> str:
        """The source's name: the class name without a ``Datasource`` suffix."""
        name = type(self).__name__
        return name[: -len("Datasource")] if name.endswith("Datasource") and name != "Datasource" else name

    def estimate_inmemory_data_size(self) -> Optional[int]:
        """Bytes the rows take in memory, or None if unknown."""
        raise NotImplementedError

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: Optional[int] = None, data_context=None
    ) -> List[ReadTask]:
        """About ``parallelism`` read tasks that together yield every row once."""
        raise NotImplementedError

    def create_reader(self, **read_args) -> "Reader":
        """Ray's older interface (a ``Reader``), still served for old subclasses."""
        return _LegacyReader(self, **read_args)

    def prepare_read(self, parallelism: int, **read_args) -> List[ReadTask]:
        """Ray's older interface: implement :meth:`get_read_tasks` instead."""
        raise NotImplementedError

    @property
    def should_create_reader(self) -> bool:
        own = type(self)
        return (
            own.get_read_tasks is Datasource.get_read_tasks
            or own.estimate_inmemory_data_size is Datasource.estimate_inmemory_data_size
        )

    @property
    def supports_distributed_reads(self) -> bool:
        return True


class Reader:
    """Ray's older, stateful read interface: ``estimate_inmemory_data_size`` and
    ``get_read_tasks(parallelism)``."""

    def estimate_inmemory_data_size(self) -> Optional[int]:
        raise NotImplementedError

    def get_read_tasks(self, parallelism: int) -> List[ReadTask]:
        raise NotImplementedError


class _LegacyReader(Reader):
    def __init__(self, datasource: Datasource, **read_args):
        self._datasource, self._read_args = datasource, read_args

    def estimate_inmemory_data_size(self) -> Optional[int]:
        return None

    def get_read_tasks(self, parallelism: int) -> List[ReadTask]:
        return self._datasource.prepare_read(parallelism, **self._read_args)


__all__ = ["Datasource", "ReadTask", "Reader"]
