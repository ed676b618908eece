"""A rank's shard of each dataset as xgboost matrices, and the checks that name bad input.

Each rank builds its matrices from its own shard only: ``QuantileDMatrix`` for the
``hist`` tree method (in a collective, xgboost merges the ranks' quantile sketches, so
every rank gets the same bin edges), ``DMatrix`` for the others. The validation sets
reuse the training set's bins (``ref=``), as xgboost's docs ask.
"""
from __future__ import annotations

from .. import session as _session


def check_columns(columns, dtypes, label_column: str, name: str) -> None:
    """Raise for a label that is not there, or a feature that xgboost cannot take.

    Args:
        columns (list[str]): the dataset's column names.
        dtypes (list | None): their dtypes (numpy / pandas / pyarrow), same order; None skips
            the dtype check.
        label_column (str): the label's column.
        name (str): the dataset's key in ``datasets`` (for the message).

    Raises:
        ValueError: the label is missing (the message lists the columns there are), or a
            feature column is not numeric or bool (naming it and its dtype).
    """
    columns = [str(c) for c in columns]
    if label_column not in columns:
        raise ValueError(f"label_column={label_column!r} is not a column of datasets[{name!r}]; its "
                         f"columns are {columns}")
    if dtypes is None:
        return
    for col, dtype in zip(columns, dtypes):
        if col != label_column and not _numeric(dtype):
            raise ValueError(f"datasets[{name!r}] column {col!r} has dtype {dtype}, which xgboost cannot "
                             "train on: convert it to numbers first (e.g. df[col].astype('category')"
                             ".cat.codes, or one-hot with pandas.get_dummies), or drop it")


def _numeric(dtype) -> bool:
    import numpy as np

    try:
        import pyarrow as pa

        if isinstance(dtype, pa.DataType):
            return pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_boolean(dtype)
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        pass
    try:
        kind = np.dtype(dtype).kind
    except TypeError:  # a pandas extension dtype (string, category, nullable ints)
        kind = getattr(getattr(dtype, "numpy_dtype", None), "kind", "O")
    return kind in "biuf"


def check_frame(df, label_column: str, name: str) -> None:
    """:func:`check_columns` for a pandas DataFrame."""
    check_columns(list(df.columns), list(df.dtypes), label_column, name)


def rank_slice(n: int, rank: int, world: int) -> slice:
    """Rows ``[rank * n // world, (rank + 1) * n // world)``: contiguous, sizes differ by <= 1."""
    return slice(rank * n // world, (rank + 1) * n // world)


def shard_frame(name: str, frames: dict | None):
    """This rank's part of dataset ``name`` as a pandas DataFrame.

    From ``frames`` (DataFrames shipped with the function: each rank takes its slice of
    rows), else from ``raynb.train.get_dataset_shard(name)`` (a ``datasets=`` Dataset).
    """
    import pandas as pd

    task = _session._require("shard_frame")
    if frames is not None and name in frames:
        df = frames[name]
        return df.iloc[rank_slice(len(df), task["rank"], task["world_size"])]
    get_shard = getattr(_session, "get_dataset_shard", None)
    if get_shard is None:
        raise RuntimeError(f"dataset {name!r} did not travel with this run, and this raynb has no "
                           "get_dataset_shard(); pass pandas DataFrames in datasets=")
    shard = get_shard(name)
    batches = list(shard.iter_batches(batch_format="pandas"))
    return pd.concat(batches, ignore_index=True) if batches else pd.DataFrame()


def build_matrices(names: list[str], frames: dict | None, label_column: str, params: dict):
    """``[(matrix, name), ...]`` for ``xgboost.train(evals=...)``, "train" first.

    Raises:
        ValueError: a shard lacks the label or has a non-numeric feature (as :func:`check_frame`).
    """
    import xgboost

    hist = params.get("tree_method") in (None, "hist", "auto")
    out, train = [], None
    for name in ["train"] + [n for n in names if n != "train"]:
        df = shard_frame(name, frames)
        check_frame(df, label_column, name)
        X, y = df.drop(columns=[label_column]), df[label_column]
        if not hist:
            m = xgboost.DMatrix(X, label=y)
        elif train is None:
            m = xgboost.QuantileDMatrix(X, label=y, max_bin=params.get("max_bin", 256))
        else:
            m = xgboost.QuantileDMatrix(X, label=y, ref=train)
        train = train if train is not None else m
        out.append((m, name))
    return out
