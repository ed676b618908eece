"""A dataset as numbered units of contiguous rows, each read on its own: how work is split
when every row must be read exactly once (XGBoost's shards, batch inference).

``get_dataset_shard`` gives every rank the same number of rows (padding by wrapping, or
dropping the tail), as ``DistributedSampler`` does for SGD. A gradient-boosted model and
a prediction job need each row once: here a rank takes whole units instead.

- In memory: units are runs of ``unit_rows`` rows (views of the shared columns).
- Files: units are runs of at most ``unit_rows`` rows of a parquet row group (csv: of a
  file), as the dataset listed them (a unit reads its row group and keeps its slice).

Units are numbered in the dataset's (unshuffled) order, so writing unit ``i``'s output
as part ``i`` keeps the original row order.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import block
from .sources import FileSource, InMemorySource


@dataclass(frozen=True)
class Unit:
    """Rows ``[first, end)`` of the source's piece ``piece`` (a row group, or None in memory),
    which start at global row ``start``."""

    index: int
    piece: int | None
    first: int
    end: int
    start: int

    @property
    def num_rows(self) -> int:
        return self.end - self.first


def units_of(dataset, unit_rows: int) -> list[Unit]:
    """The dataset's rows as units of at most ``unit_rows`` rows, in order, none across a
    row group / file boundary.

    Raises:
        TypeError: a dataset whose source is neither in memory nor files.
    """
    src = dataset._source
    step = max(1, int(unit_rows))
    if isinstance(src, InMemorySource):  # SharedSource too (its subclass)
        n = src.num_rows()
        return [Unit(i, None, s, min(s + step, n), s) for i, s in enumerate(range(0, n, step))]
    if isinstance(src, FileSource):
        out, start = [], 0
        for piece, (_, _, rows) in enumerate(src.units):
            for first in range(0, rows, step):
                end = min(first + step, rows)
                out.append(Unit(len(out), piece, first, end, start))
                start += end - first
        return out
    raise TypeError(f"cannot split a dataset of {type(src).__name__} into row ranges")


def assign(units: list[Unit], world_size: int, rank: int) -> list[Unit]:
    """Rank ``rank``'s units: a contiguous run, the rows balanced (each rank's share of the
    rows ends at the unit boundary nearest ``(rank + 1) * n / world_size``)."""
    n = sum(u.num_rows for u in units)
    if n == 0:
        return []

    def cut(r: int) -> int:  # index of the first unit at or past rank r's start
        target = r * n / world_size
        return min(
            range(len(units) + 1), key=lambda i: abs((units[i].start if i < len(units) else n) - target)
        )

    lo, hi = cut(rank), cut(rank + 1)
    return units[lo:hi]


def read_unit(dataset, unit: Unit, batch_size: int | None):
    """Numpy batches of at most ``batch_size`` rows (None: one batch) of ``unit``, with the
    dataset's lazy ``map_batches`` operations applied (batch index = the unit's)."""
    src = dataset._source
    chunk = batch_size or max(1, unit.num_rows)
    if isinstance(src, InMemorySource):
        cols = src.columns()
        stream = (
            block.take_rows(cols, slice(s, min(s + chunk, unit.end)))
            for s in range(unit.first, unit.end, chunk)
        )
    else:
        stream = src._read_unit(unit.piece, unit.first, unit.end, chunk)
    for batch in stream:
        if dataset._ops:
            batch = dataset._apply_ops(batch, unit.index, 0)
        yield batch


def rank_batches_read_once(dataset, world_size: int, rank: int, batch_size: int | None = None):
    """Rank ``rank``'s batches when every row of ``dataset`` is read exactly once over the
    ranks: its units' batches, in order (``sharding.rank_rows`` gives row indices instead)."""
    n = dataset._source.num_rows()
    if isinstance(dataset._source, InMemorySource):  # one exact slice: sizes differ by <= 1 row
        lo, hi = rank * n // world_size, (rank + 1) * n // world_size
        units = [Unit(rank, None, lo, hi, lo)] if hi > lo else []
    else:  # 8 units a rank: the shares balanced to 1/8 of one
        units = assign(units_of(dataset, max(1, -(-n // max(1, 8 * world_size)))), world_size, rank)
    for unit in units:
        yield from read_unit(dataset, unit, batch_size)
