"""The trial table's order, counts and live sets, kept up to date as trials change.

A live redraw shows the best trial, the RUNNING ones and the top of the table; with
thousands of trials, sorting and counting them all at every redraw would make the table
slow down as the sweep goes on. `TrialIndex` is told of every change (a trial added, a
status changed, a new latest value) and answers the redraw's questions by looking only at
what it shows: the ranked trials sit in a list kept sorted with `bisect`, the unranked ones
in added order, the RUNNING and ERROR ones in their own dicts, the counts per status in a
`collections.Counter`.
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Iterator


class TrialIndex:
    """Table order and counts for `TuneProgress` (not thread-safe: its lock guards it).

    Args:
        mode (str | None): ``"min"``, ``"max"`` or None (no ranking: added order).

    Rows passed in are `trial_table.TrialRow` objects (``trial_id``, ``order``,
    ``status``, ``latest``).
    """

    def __init__(self, mode: str | None):
        self._sign = -1.0 if mode == "max" else 1.0
        self._ranked_by_mode = mode is not None
        self._ranked: list[tuple[float, int, str]] = []  # (sign * latest, order, id), sorted
        self._unranked: dict[str, None] = {}  # no latest value yet (or no mode), added order
        self.running: dict[str, None] = {}
        self.errors: dict[str, None] = {}
        self.counts: Counter = Counter()

    def added(self, row) -> None:
        """A new trial (no latest value yet)."""
        self._unranked[row.trial_id] = None
        self.counts[row.status] += 1
        self._track_status(row.trial_id, row.status)

    def status_changed(self, row, old: str) -> None:
        """``row.status`` was ``old``."""
        if old == row.status:
            return
        self.counts[old] -= 1
        self.counts[row.status] += 1
        self.running.pop(row.trial_id, None)
        self.errors.pop(row.trial_id, None)
        self._track_status(row.trial_id, row.status)

    def latest_changed(self, row, old: float | None) -> None:
        """``row.latest`` was ``old`` (None: the trial had no value yet)."""
        if not self._ranked_by_mode:
            return
        if old is None:
            self._unranked.pop(row.trial_id, None)
        else:
            key = (self._sign * old, row.order, row.trial_id)
            i = bisect.bisect_left(self._ranked, key)
            if i < len(self._ranked) and self._ranked[i] == key:
                del self._ranked[i]
        bisect.insort(self._ranked, (self._sign * row.latest, row.order, row.trial_id))

    def best_id(self) -> str | None:
        """The trial with the best latest value; None without a mode or values."""
        return self._ranked[0][2] if self._ranked_by_mode and self._ranked else None

    def in_table_order(self) -> Iterator[str]:
        """Trial ids best first (ranked by latest value, then the rest in added order);
        lazy, so a caller that needs the top k reads only k."""
        for _, _, tid in self._ranked:
            yield tid
        yield from self._unranked

    def sort_key(self, row) -> tuple:
        """The key that puts rows in table order."""
        if not self._ranked_by_mode or row.latest is None:
            return (1, 0.0, row.order)
        return (0, self._sign * row.latest, row.order)

    def _track_status(self, trial_id: str, status: str) -> None:
        if status == "RUNNING":
            self.running[trial_id] = None
        elif status == "ERROR":
            self.errors[trial_id] = None


__all__ = ["TrialIndex"]
