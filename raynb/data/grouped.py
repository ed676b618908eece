"""``Dataset.groupby(key)`` (Ray Data's ``GroupedData``) and the whole-dataset aggregates
(``Dataset.sum/min/max/mean/std``), computed with pandas in this process.

Result columns are named as Ray names them: the key column(s), then ``count()``,
``sum(x)``, ``mean(x)``, ...; groups come sorted by key.
"""

from __future__ import annotations

_HOW = ("count", "sum", "min", "max", "mean", "std")


def _on_columns(df, on, keys: list) -> list:
    if on is None:
        return [c for c in df.columns if c not in keys]
    cols = [on] if isinstance(on, str) else list(on)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"no column {missing} to aggregate (the dataset has {list(df.columns)})")
    return cols


def _agg(series, how: str, ignore_nulls: bool, ddof: int = 1):
    if how == "std":
        return series.std(ddof=ddof, skipna=ignore_nulls)
    return getattr(series, how)(skipna=ignore_nulls)


def aggregate_all(ds, how: str, on, ignore_nulls: bool = True, ddof: int = 1):
    """``ds.<how>(on)``: one value for one column, else a dict ``{"<how>(col)": value}``
    (None for a dataset with no rows)."""
    df = ds.to_pandas()
    if not len(df):
        return None
    cols = _on_columns(df, on, [])
    out = {f"{how}({c})": _scalar(_agg(df[c], how, ignore_nulls, ddof)) for c in cols}
    return next(iter(out.values())) if isinstance(on, str) else out


def aggregate_dataset(ds, aggs) -> dict:
    """``ds.aggregate(*aggs)``: ``{name: value}`` over every row (Ray's dict)."""
    from .aggregate import aggregate_frame

    return aggregate_frame(ds.to_pandas(), aggs)


def _scalar(v):
    return v.item() if hasattr(v, "item") else v


class GroupedData:
    """Rows of a dataset grouped by ``key`` (one column name or a list).

    Raises (on aggregation):
        ValueError: a key or ``on`` column the dataset lacks.
    """

    def __init__(self, dataset, key):
        if key is None or callable(key):
            raise NotImplementedError(
                "groupby(None / a function) is not served by raynb; group by column "
                "name(s) (see docs/coming-from-ray.md)"
            )
        self._ds, self._keys = dataset, [key] if isinstance(key, str) else list(key)

    def _frame(self):
        df = self._ds.to_pandas()
        missing = [k for k in self._keys if k not in df.columns]
        if missing and len(df):
            raise ValueError(
                f"groupby({self._keys}): no column {missing} (the dataset has {list(df.columns)})"
            )
        return df

    def _result(self, out):
        from . import block

        out = out.reset_index().sort_values(self._keys, kind="stable")
        return self._ds._materialized(
            block.columns_from({str(c): out[c].to_numpy() for c in out.columns}, "groupby")
        )

    def count(self):
        """A dataset of the keys and ``count()``, the rows of each group."""
        df = self._frame()
        out = df.groupby(self._keys, sort=True).size().rename("count()")
        return self._result(out.to_frame())

    def _aggregate(self, how: str, on, ignore_nulls: bool, ddof: int = 1):
        df = self._frame()
        cols = _on_columns(df, on, self._keys)
        g = df.groupby(self._keys, sort=True)
        out = g[cols].agg(lambda s: _agg(s, how, ignore_nulls, ddof))
        return self._result(out.rename(columns={c: f"{how}({c})" for c in cols}))

    def sum(self, on=None, ignore_nulls: bool = True):
        """A dataset of the keys and ``sum(col)`` per group for each ``on`` column (all others by default)."""
        return self._aggregate("sum", on, ignore_nulls)

    def min(self, on=None, ignore_nulls: bool = True):
        """A dataset of the keys and ``min(col)`` per group."""
        return self._aggregate("min", on, ignore_nulls)

    def max(self, on=None, ignore_nulls: bool = True):
        """A dataset of the keys and ``max(col)`` per group."""
        return self._aggregate("max", on, ignore_nulls)

    def mean(self, on=None, ignore_nulls: bool = True):
        """A dataset of the keys and ``mean(col)`` per group."""
        return self._aggregate("mean", on, ignore_nulls)

    def std(self, on=None, ddof: int = 1, ignore_nulls: bool = True):
        """A dataset of the keys and ``std(col)`` per group (``ddof`` 1, as Ray)."""
        return self._aggregate("std", on, ignore_nulls, ddof)

    def aggregate(self, *aggs):
        """A dataset of the keys and one column per aggregation (``Count()``,
        ``Mean("x")``, ... from ``raynb.data.aggregate``), one row per group, sorted by key."""
        from . import block
        from .aggregate import aggregate_frame

        df = self._frame()
        rows = []
        for key, group in df.groupby(self._keys, sort=True):
            key = key if isinstance(key, tuple) else (key,)
            rows.append({**dict(zip(self._keys, key)), **aggregate_frame(group, aggs, key)})
        if not rows:
            return self._ds._materialized({})
        return self._ds._materialized(
            block.columns_from({k: [r[k] for r in rows] for k in rows[0]}, "groupby().aggregate")
        )

    def map_groups(self, fn, *, batch_format: str | None = "default", fn_args=None, fn_kwargs=None, **kwargs):
        """``fn(group batch) -> batch`` on each group (sorted by key); the outputs joined.

        Raises:
            MapBatchesError: ``fn`` raised (the group's index named).
        """
        import numpy as np
        import pandas as pd

        from . import block
        from .transforms import UDF, MapBatches

        fmt = block.check_batch_format(batch_format)
        step = MapBatches(UDF("map_groups", fn, fn_args, fn_kwargs), fmt)
        batch = self._ds._collect()
        missing = [k for k in self._keys if batch and k not in batch]
        if missing:
            raise ValueError(f"groupby({self._keys}): no column {missing} (the dataset has {list(batch)})")
        outs = []
        if batch:
            # Groups are found on the key columns alone and cut from the numpy batch, so a
            # tensor column (images) stays an n-d array in each group, as in Ray.
            keys = pd.DataFrame({k: batch[k] for k in self._keys})
            groups = keys.groupby(self._keys, sort=True).indices
            for i, idx in enumerate(groups.values()):
                outs.append(step(block.take_rows(batch, np.sort(idx)), i, 0))
        return self._ds._materialized(block.concat(outs) if outs else {})
