"""Ray Data's block vocabulary for user code: ``BlockMetadata`` (what a ``ReadTask``
says about its rows before it runs) and ``BlockAccessor`` (what a ``Datasink`` or a
file datasink gets). A block is a ``pyarrow.Table`` or a ``pandas.DataFrame``, as Ray's;
raynb's own batches (dicts of numpy arrays) are accepted too. Imports nothing of raynb,
so ``block`` can serve these names as ``ray.data.block`` does."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

Block = Any  # a pyarrow.Table or a pandas.DataFrame (Ray's ``Block`` union)


@dataclass(frozen=True)
class BlockMetadata:
    """What a read task knows about its rows before it runs (Ray's ``BlockMetadata``).

    Attributes:
        num_rows (int | None): the rows the task yields; None when not known (raynb then
            reads the task once in this process to count them).
        size_bytes (int | None): about how many bytes they take in memory.
        exec_stats: unused (Ray's execution statistics); None.
        input_files (tuple[str] | None): the files read, if any.
    """

    num_rows: Optional[int]
    size_bytes: Optional[int]
    exec_stats: Any = None
    task_exec_stats: Any = field(default=None)
    input_files: Optional[Tuple[str, ...]] = field(default=None)

    def __post_init__(self):
        if self.input_files is not None and not isinstance(self.input_files, tuple):
            object.__setattr__(self, "input_files", tuple(self.input_files))


def as_table(block):
    """A block (pyarrow Table, pandas DataFrame, dict of arrays or lists) as a
    ``pyarrow.Table``.

    Raises:
        TypeError: any other type, named.
    """
    import pyarrow as pa

    if isinstance(block, pa.Table):
        return block
    if isinstance(block, pa.RecordBatch):
        return pa.Table.from_batches([block])
    if isinstance(block, dict):
        return pa.table({k: _arrow_column(v) for k, v in block.items()})
    if type(block).__name__ == "DataFrame":
        return pa.Table.from_pandas(block, preserve_index=False)
    raise TypeError(
        f"a block is a pyarrow.Table or a pandas.DataFrame (as in Ray Data), got {type(block).__name__}"
    )


def _arrow_column(values):
    import numpy as np
    import pyarrow as pa

    if isinstance(values, np.ndarray) and values.ndim == 2 and values.dtype.kind in "biufc":
        return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])
    if isinstance(values, np.ndarray) and values.ndim > 2:
        return pa.array([v.tolist() for v in values])
    return pa.array(values)


def _numpy_column(col):
    """An arrow column as numpy: fixed-size lists as a 2-d array, nested ones an array per row."""
    import numpy as np
    import pyarrow as pa

    if pa.types.is_fixed_size_list(col.type) and col.null_count == 0:
        flat = col.combine_chunks().flatten().to_numpy(zero_copy_only=False)
        return flat.reshape(len(col), col.type.list_size)
    try:
        return col.to_numpy()
    except Exception:  # noqa: BLE001 - nested types: one value per row
        out = np.empty(len(col), dtype=object)
        out[:] = col.to_pylist()
        return out


class BlockAccessor:
    """Read access to one block, whatever its type (Ray's ``BlockAccessor``)."""

    def __init__(self, block):
        self._table = as_table(block)

    @staticmethod
    def for_block(block) -> "BlockAccessor":
        """The accessor of ``block`` (a pyarrow Table, pandas DataFrame or dict of arrays)."""
        return block if isinstance(block, BlockAccessor) else BlockAccessor(block)

    def num_rows(self) -> int:
        return self._table.num_rows

    def size_bytes(self) -> int:
        return int(self._table.nbytes)

    def schema(self):
        """The block's ``pyarrow.Schema``."""
        return self._table.schema

    def column_names(self) -> list:
        return list(self._table.column_names)

    def to_arrow(self):
        return self._table

    def to_block(self):
        return self._table

    def to_pandas(self):
        return self._table.to_pandas()

    def to_numpy(self, columns=None):
        """One column as a numpy array (``columns`` a name), or a dict of them."""
        batch = {name: _numpy_column(self._table.column(name)) for name in self._table.column_names}
        if isinstance(columns, str):
            return batch[columns]
        return batch if columns is None else {c: batch[c] for c in columns}

    def to_batch_format(self, batch_format: str):
        """The block as ``"pyarrow"``, ``"pandas"`` or ``"numpy"`` (a dict of arrays)."""
        if batch_format in ("pyarrow", "default", None):
            return self._table
        if batch_format == "pandas":
            return self.to_pandas()
        if batch_format == "numpy":
            return self.to_numpy()
        raise ValueError(f"batch_format={batch_format!r}: use 'pyarrow', 'pandas' or 'numpy'")

    def slice(self, start: int, end: int, copy: bool = False):
        return self._table.slice(start, end - start)

    def iter_rows(self, public_row_format: bool = True):
        """The rows, each a dict of column -> Python value."""
        yield from self._table.to_pylist()
