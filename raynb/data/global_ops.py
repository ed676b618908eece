"""Dataset operations that need every row (Ray Data's ``limit``, ``union``, ``sort``,
``repartition``, ``split``, ``split_at_indices``, ``split_proportionately``,
``train_test_split``, ``groupby``, ``unique`` and the column aggregates).

raynb computes them in this process, once, when they are called (Ray plans them lazily
over its object store): the rows are read with the dataset's steps applied, and the
result is a dataset held in memory, whose columns go to shared memory when a run uses
it. A mixin of ``Dataset``.
"""

from __future__ import annotations

from . import block


class GlobalOpsMixin:
    """The whole-dataset methods of ``Dataset`` (see the module's docstring)."""

    def limit(self, limit: int):
        """The first ``limit`` rows.

        Raises:
            ValueError: a negative ``limit``.
        """
        if not isinstance(limit, int) or limit < 0:
            raise ValueError(f"limit({limit!r}): give a number of rows >= 0")
        return self._materialized(self._collect(limit))

    def union(self, *other):
        """This dataset's rows followed by each of ``other``'s.

        Raises:
            TypeError: an argument that is not a Dataset.
            ValueError: datasets of different columns (named).
        """
        for o in other:
            if not isinstance(o, GlobalOpsMixin):
                raise TypeError(f"union() takes raynb.data.Dataset objects, got {type(o).__name__}")
        return self._materialized(block.concat([self._collect()] + [o._collect() for o in other]))

    def repartition(
        self,
        num_blocks: int | None = None,
        target_num_rows_per_block: int | None = None,
        *,
        strict: bool = False,
        shuffle: bool = False,
        keys=None,
        sort: bool = False,
    ):
        """The same rows, computed now (``materialize``): in-memory data has no blocks
        in raynb (ranks read row ranges), so the block count has nothing to change.
        ``shuffle=True`` shuffles the rows too.

        Raises:
            ValueError: neither or both of ``num_blocks`` / ``target_num_rows_per_block``,
                or a count below 1.
        """
        if (num_blocks is None) == (target_num_rows_per_block is None):
            raise ValueError("repartition(): give num_blocks or target_num_rows_per_block (one of them)")
        if (num_blocks or target_num_rows_per_block) < 1:
            raise ValueError("repartition(): the count must be >= 1")
        if keys is not None or sort:
            raise NotImplementedError(
                "repartition(keys=..., sort=...) (hash partitioning) is not served by "
                "raynb; see docs/coming-from-ray.md"
            )
        out = (self.random_shuffle() if shuffle else self).materialize()
        # Rows are not held in blocks here; the count is kept for what Ray ties to blocks
        # (num_blocks(), one written file per block).
        out._num_blocks = num_blocks or max(1, -(-out.count() // target_num_rows_per_block))
        return out

    def num_blocks(self) -> int:
        """The block count ``repartition`` gave this dataset, else 1 (raynb does not keep
        rows in blocks: a rank reads row ranges)."""
        return getattr(self, "_num_blocks", None) or 1

    def sort(self, key, descending=False, boundaries=None):
        """The rows ordered by the column(s) ``key`` (stable; ``descending`` one bool or one
        per key).

        Raises:
            ValueError: a column the dataset lacks; ``descending`` of another length.
        """
        import numpy as np

        keys = [key] if isinstance(key, str) else list(key)
        desc = list(descending) if isinstance(descending, (list, tuple)) else [bool(descending)] * len(keys)
        if len(desc) != len(keys):
            raise ValueError(f"sort(descending={descending!r}): give one bool, or one per key ({len(keys)})")
        cols = self._collect()
        if not cols:
            return self._materialized(cols)
        missing = [k for k in keys if k not in cols]
        if missing:
            raise ValueError(f"sort(key={key!r}): no column {missing} (the dataset has {list(cols)})")
        order = np.arange(block.num_rows(cols))
        for k, d in reversed(list(zip(keys, desc))):  # last key first: stable sorts compose
            values = cols[k][order]
            step = _stable_argsort(values, d)
            order = order[step]
        return self._materialized(block.take_rows(cols, order))

    def _split_at(self, cols: dict, indices: list) -> list:
        n = block.num_rows(cols)
        bounds = [0] + [min(max(int(i), 0), n) for i in indices] + [n]
        return [
            self._materialized(block.take_rows(cols, slice(a, max(a, b)))) for a, b in zip(bounds, bounds[1:])
        ]

    def split_at_indices(self, indices: list) -> list:
        """Datasets of the rows before ``indices[0]``, between each pair, and after the last.

        Raises:
            ValueError: indices negative or not ascending.
        """
        if any(i < 0 for i in indices) or sorted(indices) != list(indices):
            raise ValueError(f"split_at_indices({indices}): indices must be >= 0 and ascending")
        return self._split_at(self._collect(), indices)

    def split(self, n: int, *, equal: bool = False, locality_hints=None) -> list:
        """``n`` disjoint datasets of contiguous rows. ``equal=True``: each of ``count // n``
        rows (the rest dropped, as Ray); else sizes differ by at most one row.

        Raises:
            ValueError: ``n`` below 1.
        """
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"split({n!r}): give a number of pieces >= 1")
        cols = self._collect()
        total = block.num_rows(cols)
        if equal:
            per = total // n
            kept = block.take_rows(cols, slice(0, per * n)) if cols else cols
            return self._split_at(kept, [per * i for i in range(1, n)])
        return self._split_at(cols, [total * i // n for i in range(1, n)])

    def split_proportionately(self, proportions: list) -> list:
        """Datasets of the given fractions of the rows, and one of the rest (Ray's rule:
        cut at ``int(count * cumulative proportion)``, each piece at least one row).

        Raises:
            ValueError: proportions empty, not positive, or summing to 1 or more.
        """
        import numpy as np

        if not proportions or any(p <= 0 for p in proportions) or sum(proportions) >= 1:
            raise ValueError(
                f"split_proportionately({proportions}): give fractions > 0 summing to less than 1"
            )
        cols = self._collect()
        n = block.num_rows(cols)
        idx = [int(n * p) for p in np.cumsum(proportions)]
        sub = 0
        for i in range(len(idx) - 2, -1, -1):
            idx[i] -= sub
            if idx[i] == idx[i + 1]:
                sub += 1
                idx[i] -= 1
        if any(i <= 0 for i in idx):
            raise ValueError("split_proportionately(): the dataset is too small for non-empty pieces")
        return self._split_at(cols, idx)

    def train_test_split(self, test_size, *, shuffle: bool = False, seed: int | None = None, stratify=None):
        """(train, test): the last ``test_size`` rows (a fraction in (0, 1), or a count)
        are the test set, after a shuffle with ``seed`` when ``shuffle``.

        Raises:
            TypeError: ``test_size`` not a number.
            ValueError: a fraction outside (0, 1), a count outside (0, rows).
            NotImplementedError: ``stratify`` (not served).
        """
        if stratify is not None:
            raise NotImplementedError(
                "train_test_split(stratify=...) is not served by raynb; split by hand, "
                "e.g. with groupby or filter (see docs/coming-from-ray.md)"
            )
        if not isinstance(test_size, (int, float)) or isinstance(test_size, bool):
            raise TypeError(f"train_test_split(test_size={test_size!r}): give a fraction or a row count")
        ds = self.random_shuffle(seed=seed) if shuffle else self
        if isinstance(test_size, float):
            if not 0 < test_size < 1:
                raise ValueError(f"train_test_split(test_size={test_size}): a fraction must be in (0, 1)")
            return tuple(ds.split_proportionately([1 - test_size]))
        cols = ds._collect()
        n = block.num_rows(cols)
        if not 0 < test_size < n:
            raise ValueError(f"train_test_split(test_size={test_size}): a count must be in (0, {n})")
        return tuple(ds._split_at(cols, [n - test_size]))

    def groupby(self, key, num_partitions: int | None = None):
        """Rows grouped by the column(s) ``key`` (a ``GroupedData``: ``count()``,
        ``sum/min/max/mean/std(on)``, ``map_groups``)."""
        from .grouped import GroupedData

        return GroupedData(self, key)

    def aggregate(self, *aggs):
        """``{name: value}`` of each aggregation over every row (``Count()``, ``Mean("x")``,
        ``Std("x", ddof=0)``, ``Quantile("x", q=0.9)``, ``AggregateFn(...)``, from
        ``raynb.data.aggregate``), as Ray's ``Dataset.aggregate``.

        Raises:
            TypeError: an argument that is not an aggregation.
            ValueError: an aggregation's column is missing.
        """
        from .grouped import aggregate_dataset

        return aggregate_dataset(self, aggs)

    def zip(self, *others):
        """The columns of this dataset and of each of ``others`` side by side, row by row
        (Ray's ``zip``; a repeated column name gets ``_1``, ``_2``, ... as in Ray).

        Raises:
            ValueError: the datasets differ in row count.
        """
        out = dict(self._collect())
        n = len(next(iter(out.values()))) if out else 0
        for i, other in enumerate(others, 1):
            cols = other._collect()
            m = len(next(iter(cols.values()))) if cols else 0
            if m != n:
                raise ValueError(f"zip(): the datasets have {n} and {m} rows; zip needs equal row counts")
            for name, col in cols.items():
                out[name if name not in out else f"{name}_{i}"] = col
        return self._materialized(out)

    def explain(self) -> None:
        """Print the dataset's plan: its source and lazy transforms (Ray's ``explain``)."""
        print(repr(self))

    def input_files(self) -> list:
        """The files a read dataset comes from ([] for one made in memory)."""
        return list(getattr(self._source, "files", None) or [])

    def stats(self) -> str:
        """A short description of the dataset and its transforms (Ray's execution
        statistics have no counterpart: there is no streaming executor)."""
        return f"{self!r}: transforms run in the process that reads the rows; no execution statistics"

    def unique(self, column: str, ignore_nulls: bool = False) -> list:
        """The distinct values of ``column``."""
        df = self.select_columns([column]).to_pandas()
        values = df[column]
        return list((values.dropna() if ignore_nulls else values).unique())

    def _aggregate(self, how: str, on, ignore_nulls: bool = True, **kw):
        from .grouped import aggregate_all

        return aggregate_all(self, how, on, ignore_nulls, **kw)

    def sum(self, on=None, ignore_nulls: bool = True):
        """The sum of column ``on`` (a dict for several columns)."""
        return self._aggregate("sum", on, ignore_nulls)

    def min(self, on=None, ignore_nulls: bool = True):
        """The minimum of column ``on`` (a dict for several columns)."""
        return self._aggregate("min", on, ignore_nulls)

    def max(self, on=None, ignore_nulls: bool = True):
        """The maximum of column ``on`` (a dict for several columns)."""
        return self._aggregate("max", on, ignore_nulls)

    def mean(self, on=None, ignore_nulls: bool = True):
        """The mean of column ``on`` (a dict for several columns)."""
        return self._aggregate("mean", on, ignore_nulls)

    def std(self, on=None, ddof: int = 1, ignore_nulls: bool = True):
        """The standard deviation of column ``on`` (``ddof`` as Ray: 1)."""
        return self._aggregate("std", on, ignore_nulls, ddof=ddof)


def _stable_argsort(values, descending: bool):
    """A stable order of ``values`` (numbers, strings or other comparable objects)."""
    import numpy as np

    if values.dtype.hasobject:
        # sorted() is stable, reverse=True included
        return np.asarray(
            sorted(range(len(values)), key=values.__getitem__, reverse=descending), dtype=np.int64
        )
    if descending:
        # stable descending: sort the reversed array ascending by negated rank
        rev = values[::-1]
        order = np.argsort(rev, kind="stable")[::-1]
        return (len(values) - 1 - order).astype(np.int64)
    return np.argsort(values, kind="stable")
