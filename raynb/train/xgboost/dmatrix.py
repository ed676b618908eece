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
        raise ValueError(
            f"label_column={label_column!r} is not a column of datasets[{name!r}]; its columns are {columns}"
        )
    if dtypes is None:
        return
    for col, dtype in zip(columns, dtypes):
        if col != label_column and not _numeric(dtype):
            fix = (
                "split it into one column per element"
                if _per_row_array(dtype)
                else "convert it to numbers first (e.g. df[col].astype('category').cat.codes, or "
                "one-hot with pandas.get_dummies)"
            )
            raise ValueError(
                f"datasets[{name!r}] column {col!r} has dtype {dtype}, which xgboost cannot "
                f"train on: {fix}, or drop it"
            )


def _per_row_array(dtype) -> bool:
    """A raynb.data Schema type of a column with an array per row: ``"float32 (16,)"``."""
    return isinstance(dtype, str) and " (" in dtype


def _numeric(dtype) -> bool:
    import numpy as np

    if isinstance(dtype, str):  # a raynb.data Schema's type: "float32", "double" (arrow), "float32 (16,)"
        if _per_row_array(dtype):
            return False
        try:
            return np.dtype({"halffloat": "float16"}.get(dtype.strip(), dtype.strip())).kind in "biuf"
        except (TypeError, ValueError):  # not a numpy name: string, timestamp[us], dictionary<...>
            return False

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


def shard_frame(name: str):
    """This rank's part of dataset ``name`` (``datasets=``) as a pandas DataFrame: a
    contiguous run of rows, every row on exactly one rank (``raynb.data.ranges``), not
    ``get_dataset_shard``'s equal counts (which pad or drop rows: a boosted model would
    count them twice, or never).

    Raises:
        KeyError: no dataset of that name travelled with the run (names those that did).
    """
    import pandas as pd

    from ...cluster.worker import task_context
    from ...data import block
    from ...data.ranges import rank_batches_read_once
    from ..datasets import STATE_KEY

    task = _session._require("shard_frame")
    datasets = task_context.state().get(STATE_KEY) or {}
    if name not in datasets:
        raise KeyError(f"no dataset {name!r} in this run; it has {sorted(datasets)}")
    batches = list(rank_batches_read_once(datasets[name], task["world_size"], task["rank"]))
    return block.to_format(block.concat(batches), "pandas") if batches else pd.DataFrame()


def build_matrices(names: list[str], label_column: str, params: dict):
    """``[(matrix, name), ...]`` for ``xgboost.train(evals=...)``, "train" first.

    Raises:
        ValueError: a shard lacks the label or has a non-numeric feature (as :func:`check_frame`).
    """
    import xgboost

    hist = params.get("tree_method") in (None, "hist", "auto")
    out, train = [], None
    for name in ["train"] + [n for n in names if n != "train"]:
        df = shard_frame(name)
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
