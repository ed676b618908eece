"""Ray Data's aggregations (``ray.data.aggregate``): ``Count``, ``Sum``, ``Min``, ``Max``,
``Mean``, ``Std``, ``AbsMax``, ``Quantile``, ``Unique``, ``CountDistinct``, ``AsList`` and
the accumulator form ``AggregateFn(init, accumulate_row, merge, finalize, name)``, for
``Dataset.aggregate(*aggs)`` and ``groupby(key).aggregate(*aggs)``.

They are computed in this process over a pandas frame of the rows (or of one group),
named as Ray names them (``count()``, ``mean(x)``, ``quantile(x)``, or ``alias_name``).
"""

from __future__ import annotations


class AggregateFn:
    """Ray's accumulator aggregation: ``init(key) -> acc``, ``accumulate_row(acc, row) ->
    acc`` over every row (a dict), ``finalize(acc) -> value``; ``merge`` is accepted
    (the rows are folded in one pass here).

    Raises:
        ValueError: no ``name``, or no ``accumulate_row``.
    """

    def __init__(
        self, init=None, merge=None, name: str | None = None, accumulate_row=None, finalize=None, **kw
    ):
        if not name:
            raise ValueError("AggregateFn(name=...): give the result's column name")
        if accumulate_row is None and type(self) is AggregateFn:
            raise ValueError("AggregateFn(accumulate_row=...): give f(acc, row) -> acc")
        self.name, self._init, self._merge = name, init, merge
        self._accumulate_row, self._finalize = accumulate_row, finalize or (lambda a: a)

    def compute(self, frame, key=None):
        """This aggregation's value over ``frame`` (a pandas DataFrame of the rows)."""
        acc = self._init(key) if self._init else None
        for row in frame.to_dict("records"):
            acc = self._accumulate_row(acc, row)
        return self._finalize(acc)


class _OnColumn(AggregateFn):
    label = ""

    def __init__(self, on: str | None = None, ignore_nulls: bool = True, alias_name: str | None = None):
        self.on, self.ignore_nulls = on, ignore_nulls
        self.name = alias_name or f"{self.label}({on if on is not None else ''})"

    def _column(self, frame):
        if self.on is None:
            raise ValueError(f"{type(self).__name__}(on=...): give the column to aggregate")
        if self.on not in frame.columns:
            raise ValueError(
                f"{type(self).__name__}(on={self.on!r}): no such column (have {list(frame.columns)})"
            )
        col = frame[self.on]
        return col.dropna() if self.ignore_nulls else col

    def compute(self, frame, key=None):
        col = self._column(frame)
        if not self.ignore_nulls and col.isna().any():
            return None
        return _plain(self._of(col)) if len(col) else None


def _plain(v):
    return v.item() if hasattr(v, "item") else v


class Count(_OnColumn):
    """Rows (``on=None``), or the non-null values of ``on``: ``count()``."""

    label = "count"

    def __init__(self, on: str | None = None, ignore_nulls: bool = False, alias_name: str | None = None):
        super().__init__(on, ignore_nulls, alias_name)

    def compute(self, frame, key=None):
        if self.on is None:
            return len(frame)
        return int(self._column(frame).notna().sum())


class Sum(_OnColumn):
    """``sum(on)``."""

    label = "sum"

    def _of(self, col):
        return col.sum()


class Min(_OnColumn):
    """``min(on)``."""

    label = "min"

    def _of(self, col):
        return col.min()


class Max(_OnColumn):
    """``max(on)``."""

    label = "max"

    def _of(self, col):
        return col.max()


class Mean(_OnColumn):
    """``mean(on)``."""

    label = "mean"

    def _of(self, col):
        return col.mean()


class Std(_OnColumn):
    """``std(on)``, with ``ddof`` (1, as Ray's)."""

    label = "std"

    def __init__(self, on=None, ddof: int = 1, ignore_nulls: bool = True, alias_name=None):
        super().__init__(on, ignore_nulls, alias_name)
        self.ddof = ddof

    def _of(self, col):
        return col.std(ddof=self.ddof)


class AbsMax(_OnColumn):
    """``abs_max(on)``: the largest absolute value."""

    label = "abs_max"

    def _of(self, col):
        return col.abs().max()


class Quantile(_OnColumn):
    """``quantile(on)``: the ``q`` quantile (0.5: the median; Ray's nearest-rank-free
    linear interpolation, as numpy's)."""

    label = "quantile"

    def __init__(self, on=None, q: float = 0.5, ignore_nulls: bool = True, alias_name=None):
        super().__init__(on, ignore_nulls, alias_name)
        self.q = q

    def _of(self, col):
        return col.quantile(self.q)


class Unique(_OnColumn):
    """``unique(on)``: the distinct values, as a list."""

    label = "unique"

    def __init__(self, on=None, ignore_nulls: bool = False, alias_name=None, **kw):
        super().__init__(on, ignore_nulls, alias_name)

    def compute(self, frame, key=None):
        return list(dict.fromkeys(self._column(frame).tolist()))


class CountDistinct(Unique):
    """``count_distinct(on)``: how many distinct values."""

    label = "count_distinct"

    def compute(self, frame, key=None):
        return len(super().compute(frame, key))


class AsList(_OnColumn):
    """``list(on)``: every value, as a list."""

    label = "list"

    def __init__(self, on=None, alias_name=None, ignore_nulls: bool = False):
        super().__init__(on, ignore_nulls, alias_name)

    def compute(self, frame, key=None):
        return self._column(frame).tolist()


def aggregate_frame(frame, aggs, key=None) -> dict:
    """``{name: value}`` of each of ``aggs`` over ``frame``.

    Raises:
        TypeError: an argument that is not an aggregation (named).
    """
    out = {}
    for agg in aggs:
        if not isinstance(agg, AggregateFn):
            raise TypeError(
                f"aggregate() takes raynb.data.aggregate functions (Count(), Mean('x'), ...), got {agg!r:.60}"
            )
        out[agg.name] = agg.compute(frame, key)
    return out


AggregateFnV2 = AggregateFn
