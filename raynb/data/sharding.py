"""Which rows each rank reads in an epoch (pure functions, no I/O).

The rules follow ``torch.utils.data.DistributedSampler``: every rank gets the same
number of rows, ``ceil(n / world_size)`` with the order padded by wrapping around to
its start (``pad=True``, the default), or ``floor(n / world_size)`` with the tail
dropped (``pad=False``). Ranks take contiguous runs of the epoch's order (rank ``r``
the positions ``[r * per, (r + 1) * per)``), so an unshuffled in-memory shard is a
slice of the arrays (batches are views, no copy).

With a shuffle, the epoch's order is a permutation of all ``n`` rows drawn from
``numpy.random.default_rng([seed, epoch])``: the same on every rank (they share the
seed), different each epoch, so rows move between ranks (a global shuffle), and the
same again for the same seed and epoch (a restarted attempt reads what the failed one
did). File datasets permute their row groups (blocks) instead of rows, as Ray Data's
``randomize_block_order``; ``local_shuffle_buffer_size`` mixes rows within a window.
"""

from __future__ import annotations


def rows_per_rank(n: int, world_size: int, pad: bool = True) -> int:
    """Rows each rank reads: ``ceil(n / world_size)`` padded, ``n // world_size`` dropped."""
    return -(-n // world_size) if pad else n // world_size


def epoch_order(n: int, seed: int | None, epoch: int):
    """The epoch's order of ``n`` items: None for the identity (no shuffle), else an
    int64 permutation from ``default_rng([seed, epoch])``."""
    if seed is None:
        return None
    import numpy as np

    return np.random.default_rng([int(seed) & 0xFFFFFFFF, int(epoch)]).permutation(n)


def rank_rows(n: int, world_size: int, rank: int, order=None, pad: bool = True):
    """This rank's rows: a ``slice`` when they are one contiguous run of the unshuffled
    rows (no wrap), else an int64 array of row indices (positions taken mod ``n``)."""
    import numpy as np

    per = rows_per_rank(n, world_size, pad)
    start, stop = rank * per, (rank + 1) * per
    if n == 0 or per == 0:
        return slice(0, 0)
    if order is None and stop <= n:
        return slice(start, stop)
    pos = np.arange(start, stop, dtype=np.int64) % n
    return pos if order is None else order[pos]


def rank_pieces(unit_rows: list[int], world_size: int, rank: int, order=None, pad: bool = True):
    """This rank's part of a dataset made of units (row groups, files) of ``unit_rows``
    rows, laid end to end in ``order`` (unit indices; None keeps them in place).

    Returns:
        [(unit index, first row, end row), ...] in reading order, rows within the unit.
        With evenly sized units that divide among the ranks, each piece is a whole unit.
    """
    units = list(range(len(unit_rows))) if order is None else [int(u) for u in order]
    units = [u for u in units if unit_rows[u] > 0]
    n = sum(unit_rows)
    per = rows_per_rank(n, world_size, pad)
    if n == 0 or per == 0:
        return []
    pieces, pos, stop = [], rank * per, (rank + 1) * per
    starts, acc = [], 0
    for u in units:
        starts.append(acc)
        acc += unit_rows[u]
    while pos < stop:
        p = pos % n
        # the unit holding global position p (units are few: a linear scan is fine)
        i = max(k for k, s in enumerate(starts) if s <= p)
        u = units[i]
        first = p - starts[i]
        take = min(unit_rows[u] - first, stop - pos)
        pieces.append((u, first, first + take))
        pos += take
    return pieces
