"""Columns and batches: checking what a dataset is made of, converting batch formats.

A batch is a dict of column name -> numpy array (rows along the first axis), Ray Data's
``"numpy"`` batch format; ``"pandas"`` is a ``pandas.DataFrame`` of it and ``"pyarrow"``
a ``pyarrow.Table``.

Columns are numbers (any numeric dtype, any per-row shape) or *object columns*: a 1-d
numpy array of dtype object holding one Python value per row (strings of any length,
lists, dicts, ragged arrays), as Ray Data's numpy batches hold them.
"""

from __future__ import annotations

from .block_accessor import Block, BlockAccessor, BlockMetadata  # noqa: F401 - Ray's `ray.data.block` names

BATCH_FORMATS = ("numpy", "pandas", "pyarrow", "default")


def check_batch_format(batch_format: str | None) -> str:
    """``"numpy"``, ``"pandas"`` or ``"pyarrow"`` (``"default"`` and None are numpy).

    Raises:
        ValueError: another name.
    """
    if batch_format is None or batch_format == "default":
        return "numpy"
    if batch_format not in BATCH_FORMATS:
        raise ValueError(
            f"batch_format={batch_format!r}: use 'default' or 'numpy' (a dict of numpy arrays), "
            "'pandas' (a DataFrame) or 'pyarrow' (a pyarrow.Table)"
        )
    return batch_format


def object_column(values) -> "object":
    """``values`` (a sequence) as a 1-d numpy array of dtype object, one element per row
    (a list of equal-length lists stays one list per row, not a 2-d array)."""
    import numpy as np

    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def as_column(value):
    """One column as a numpy array: numbers as numeric arrays (equal-length lists of
    numbers as a 2-d array, as numpy and Ray make them), strings and any other Python
    values as a 1-d object column."""
    import numpy as np

    if isinstance(value, np.ndarray):  # the caller's array: kept (numpy strings too)
        return value
    if hasattr(value, "to_numpy") and not isinstance(value, (list, tuple)):  # pandas / arrow
        value = value.to_numpy()
        if isinstance(value, np.ndarray) and value.dtype.kind not in "US":
            return value
    try:
        a = np.asarray(value)
    except ValueError:  # ragged: lists / arrays of different lengths
        return object_column(list(value))
    if (a.dtype.hasobject or a.dtype.kind in "US") and a.ndim >= 1:
        return object_column(list(value))
    return a


def columns_from(data: dict, what: str) -> dict:
    """``data`` (column -> array-like) as C-contiguous numpy arrays of equal length.

    Columns of Python values (strings given as a list, lists, dicts, ragged arrays)
    become 1-d object columns (``as_column``); numpy string arrays stay as they are.

    Raises:
        ValueError: no columns; a column of another length than the first (both named);
            a 0-d column.
        TypeError: a column name that is not a string.
    """
    import numpy as np

    if not data:
        raise ValueError(f"{what}: no columns given")
    out, n, first = {}, None, None
    for name, value in data.items():
        if not isinstance(name, str):
            raise TypeError(f"{what}: column names must be strings, got {name!r}")
        a = as_column(value)
        if a.ndim == 0:
            raise ValueError(f"{what}: column {name!r} is a scalar; give one value per row")
        if n is None:
            n, first = len(a), name
        elif len(a) != n:
            raise ValueError(
                f"{what}: column {name!r} has {len(a)} rows but column {first!r} has {n}; "
                "every column of a dataset needs the same number of rows"
            )
        out[name] = np.ascontiguousarray(a)
    return out


def torch_unsupported(columns: dict, objects: bool = True) -> str | None:
    """The first column (name, dtype) whose numpy dtype ``torch.from_numpy`` cannot
    take, as a message, or None (``objects=False``: object and string columns pass)."""
    for name, a in columns.items():
        if not objects and a.dtype.kind in "OUS":
            continue
        if a.dtype.kind not in "biufc":
            return (
                f"column {name!r} has dtype {a.dtype} ({a.dtype.name}), which torch cannot take: "
                "convert it to numbers before building the dataset, drop it, or turn it into "
                "numbers with ds.map_batches(fn)"
            )
    return None


def num_rows(batch) -> int:
    """Rows in a batch (dict of arrays, DataFrame, pyarrow Table)."""
    if isinstance(batch, dict):
        return len(next(iter(batch.values()))) if batch else 0
    return len(batch)


def to_format(batch: dict, batch_format: str):
    """A numpy batch in ``batch_format`` (a DataFrame for ``"pandas"``: columns of more
    than one dimension become a column of per-row arrays there; a ``pyarrow.Table`` for
    ``"pyarrow"``)."""
    if batch_format == "numpy":
        return batch
    if batch_format == "pyarrow":
        return batch_to_table(batch)
    import pandas as pd

    return pd.DataFrame({k: (list(v) if v.ndim > 1 else v) for k, v in batch.items()})


def batch_to_table(batch: dict):
    """A numpy batch as a ``pyarrow.Table``: 2-d columns become fixed-size lists (an
    embedding per row), deeper ones lists of lists."""
    import pyarrow as pa

    cols = {}
    for name, a in batch.items():
        if a.ndim == 1:
            cols[name] = pa.array(a)
        elif a.ndim == 2:
            cols[name] = pa.FixedSizeListArray.from_arrays(pa.array(a.reshape(-1)), a.shape[1])
        else:
            cols[name] = pa.array([x.tolist() for x in a])
    return pa.table(cols)


def rows_of(batch: dict) -> list:
    """The rows of a numpy batch, as dicts of column -> value: Python numbers and strings
    for 1-d columns (as Ray's rows), a numpy array per row for columns of more dimensions."""
    names = list(batch)
    cols = [
        batch[k].tolist() if batch[k].ndim == 1 and not batch[k].dtype.hasobject else batch[k] for k in names
    ]
    return [dict(zip(names, vals)) for vals in zip(*cols)]


def to_numpy_batch(value, what: str) -> dict:
    """What a ``map_batches`` function returned, as a numpy batch.

    Raises:
        TypeError: it returned something other than a dict of arrays, a DataFrame or a
            pyarrow Table (its type is named).
        ValueError: its columns differ in length.
    """
    if isinstance(value, dict):
        return columns_from(value, what)
    pd = _maybe("pandas")
    if pd is not None and isinstance(value, pd.DataFrame):
        return columns_from({str(c): stacked_if_tensors(value[c].to_numpy()) for c in value.columns}, what)
    pa = _maybe("pyarrow")
    if pa is not None and isinstance(value, pa.Table):
        return table_to_numpy(value)
    raise TypeError(
        f"{what} returned {type(value).__name__}; return a dict of numpy arrays or a pandas DataFrame"
    )


def stacked_if_tensors(a):
    """A pandas object column whose every row is a list / tuple / array of numbers of one
    shape, as one n-d numeric array (Ray makes it a tensor column, so torch gets one tensor);
    any other column unchanged."""
    import numpy as np

    if a.dtype != object or len(a) == 0 or not all(isinstance(v, (list, tuple, np.ndarray)) for v in a):
        return a
    try:
        stacked = np.asarray(list(a))
    except ValueError:  # ragged
        return a
    return stacked if stacked.ndim >= 2 and stacked.dtype.kind in "biufc" else a


def table_to_numpy(table) -> dict:
    """A pyarrow Table as a numpy batch (copies only where arrow's layout needs it)."""
    import numpy as np
    import pyarrow as pa

    out = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_fixed_size_list(col.type) and col.null_count == 0:  # a 2-d column, as written
            flat = col.combine_chunks().flatten().to_numpy(zero_copy_only=False)
            out[name] = flat.reshape(len(col), col.type.list_size)
            continue
        try:
            out[name] = col.to_numpy()
        except Exception:  # noqa: BLE001 - nested / list types: one array per row, stacked
            out[name] = np.asarray(col.to_pylist())
    return out


def concat(batches: list) -> dict:
    """Numpy batches joined along the rows (empty ones skipped; an object column with a
    numeric one gives an object column).

    Raises:
        ValueError: the batches' columns differ (both sets named).
    """
    import numpy as np

    batches = [b for b in batches if num_rows(b)] or batches[:1]
    if len(batches) == 1:
        return batches[0]
    names = list(batches[0])
    for b in batches[1:]:
        if sorted(b) != sorted(names):
            raise ValueError(
                f"cannot join batches of columns {names} and {list(b)}: every batch of a "
                "dataset needs the same columns"
            )
    out = {}
    for k in names:
        parts = [b[k] for b in batches]
        if any(p.dtype.hasobject for p in parts) and not all(p.dtype.hasobject for p in parts):
            parts = [p if p.dtype.hasobject else object_column(list(p)) for p in parts]
        out[k] = np.concatenate(parts)
    return out


def take_rows(batch: dict, idx) -> dict:
    """Rows ``idx`` (a slice: views; an index array: a gathered copy) of every column."""
    return {k: v[idx] for k, v in batch.items()}


def _maybe(module: str):
    import sys

    return sys.modules.get(module)
