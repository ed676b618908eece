"""Columns and batches: checking what a dataset is made of, converting batch formats.

A batch is a dict of column name -> numpy array (rows along the first axis), Ray Data's
``"numpy"`` batch format; ``"pandas"`` is a ``pandas.DataFrame`` of it.
"""
from __future__ import annotations

BATCH_FORMATS = ("numpy", "pandas", "default")


def check_batch_format(batch_format: str) -> str:
    """``"numpy"`` or ``"pandas"`` (``"default"`` is numpy); ValueError otherwise."""
    if batch_format not in BATCH_FORMATS:
        raise ValueError(f"batch_format={batch_format!r}: use 'numpy' (a dict of numpy arrays) or 'pandas'")
    return "numpy" if batch_format == "default" else batch_format


def columns_from(data: dict, what: str) -> dict:
    """``data`` (column -> array-like) as C-contiguous numpy arrays of equal length.

    Strings become fixed-width numpy strings (they can sit in shared memory); an
    object column that is not all strings is refused.

    Raises:
        ValueError: no columns; a column of another length than the first (both named);
            a 0-d column; an object column (named) that cannot be made fixed-width.
        TypeError: a column name that is not a string.
    """
    import numpy as np

    if not data:
        raise ValueError(f"{what}: no columns given")
    out, n, first = {}, None, None
    for name, value in data.items():
        if not isinstance(name, str):
            raise TypeError(f"{what}: column names must be strings, got {name!r}")
        a = np.asarray(value)
        if a.dtype.hasobject:
            try:
                a = a.astype(str) if all(isinstance(v, str) for v in a.reshape(-1)) else None
            except (TypeError, ValueError):
                a = None
            if a is None:
                raise ValueError(f"{what}: column {name!r} holds Python objects (dtype object), which "
                                 "cannot go into shared memory; convert it to numbers or strings first")
        if a.ndim == 0:
            raise ValueError(f"{what}: column {name!r} is a scalar; give one value per row")
        if n is None:
            n, first = len(a), name
        elif len(a) != n:
            raise ValueError(f"{what}: column {name!r} has {len(a)} rows but column {first!r} has {n}; "
                             "every column of a dataset needs the same number of rows")
        out[name] = np.ascontiguousarray(a)
    return out


def torch_unsupported(columns: dict) -> str | None:
    """The first column (name, dtype) whose numpy dtype ``torch.from_numpy`` cannot
    take, as a message, or None."""
    for name, a in columns.items():
        if a.dtype.kind not in "biufc":
            return (f"column {name!r} has dtype {a.dtype} ({a.dtype.name}), which torch cannot take: "
                    "convert it to numbers before building the dataset, drop it, or turn it into "
                    "numbers with ds.map_batches(fn)")
    return None


def num_rows(batch) -> int:
    """Rows in a batch (dict of arrays, DataFrame, pyarrow Table)."""
    if isinstance(batch, dict):
        return len(next(iter(batch.values()))) if batch else 0
    return len(batch)


def to_format(batch: dict, batch_format: str):
    """A numpy batch in ``batch_format`` (a DataFrame for ``"pandas"``; columns of more
    than one dimension become a column of per-row arrays there)."""
    if batch_format == "numpy":
        return batch
    import pandas as pd

    return pd.DataFrame({k: (list(v) if v.ndim > 1 else v) for k, v in batch.items()})


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
        return columns_from({str(c): value[c].to_numpy() for c in value.columns}, what)
    pa = _maybe("pyarrow")
    if pa is not None and isinstance(value, pa.Table):
        return table_to_numpy(value)
    raise TypeError(f"{what} returned {type(value).__name__}; return a dict of numpy arrays "
                    "or a pandas DataFrame")


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
    """Numpy batches joined along the rows."""
    import numpy as np

    if len(batches) == 1:
        return batches[0]
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def take_rows(batch: dict, idx) -> dict:
    """Rows ``idx`` (a slice: views; an index array: a gathered copy) of every column."""
    return {k: v[idx] for k, v in batch.items()}


def _maybe(module: str):
    import sys

    return sys.modules.get(module)
