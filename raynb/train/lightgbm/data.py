"""A rank's rows of each dataset as ``lightgbm.Dataset``s, and the checks that name bad input."""

from __future__ import annotations

from .. import session as _session


def check_frame(df, label_column: str, name: str) -> None:
    """Raise for a missing label, or a feature column lightgbm cannot take.

    Raises:
        ValueError: the label is missing (lists the columns there are), or a feature is
            not numeric, bool or category (named with its dtype).
    """
    import pandas as pd

    columns = [str(c) for c in df.columns]
    if label_column not in columns:
        raise ValueError(
            f"label_column={label_column!r} is not a column of datasets[{name!r}]; its columns are {columns}"
        )
    for col, dtype in df.dtypes.items():
        ok = (
            pd.api.types.is_numeric_dtype(dtype)
            or pd.api.types.is_bool_dtype(dtype)
            or isinstance(dtype, pd.CategoricalDtype)
        )
        if col != label_column and not ok:
            raise ValueError(
                f"datasets[{name!r}] column {col!r} has dtype {dtype}, which lightgbm cannot "
                "train on: convert it to numbers or to a pandas category "
                "(df[col].astype('category')), or drop it"
            )


def shard_frame(name: str):
    """This rank's part of dataset ``name`` (``datasets=``) as a pandas DataFrame: a
    contiguous run of rows, every row on exactly one rank.

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


def build_datasets(names: list[str], label_column: str):
    """``(train, [valid sets], [their names])`` of this rank's rows, "train" first among
    the names (LightGBM reports the training set's metrics too when it is a valid set).

    Raises:
        ValueError: a shard lacks the label or has a feature lightgbm cannot take.
    """
    import lightgbm

    train, sets, out_names = None, [], []
    for name in ["train"] + [n for n in names if n != "train"]:
        df = shard_frame(name)
        check_frame(df, label_column, name)
        X, y = df.drop(columns=[label_column]), df[label_column]
        ds = (
            lightgbm.Dataset(X, label=y, free_raw_data=False)
            if train is None
            else lightgbm.Dataset(X, label=y, reference=train, free_raw_data=False)
        )
        train = train if train is not None else ds
        sets.append(ds)
        out_names.append(name)
    return train, sets, out_names
