"""Tune's trial table as text, for terminals, scripts and plain IPython.

The table is printed at most every ``min_interval_s`` (and only when something
changed), and once more, complete up to ``final_rows`` rows, when tuning ends.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, TextIO

from .model import TuneProgress
from .render import _one_line


class TuneTableText:
    """A text view over a `TuneProgress` (the methods of `TuneTablePane`).

    Args:
        progress: the model the driver feeds.
        stream: where the table goes; None: ``sys.stdout`` at the time of
            writing (so redirection and capture keep working).
        min_interval_s: least seconds between two printed tables.
        max_rows: rows of a live table (best and RUNNING trials first).
        final_rows: rows of the table printed by `finish`.
        clock: monotonic seconds, injectable for tests.

    ``redraws`` counts the tables printed.
    """

    def __init__(
        self,
        progress: TuneProgress,
        stream: TextIO | None = None,
        min_interval_s: float = 5.0,
        max_rows: int = 20,
        final_rows: int = 50,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.progress = progress
        self._stream = stream
        self.min_interval_s = float(min_interval_s)
        self.max_rows = max_rows
        self.final_rows = final_rows
        self._clock = clock
        self._lock = threading.Lock()
        self._last = -float("inf")
        self._printed_version = -1
        self._printed_notes = 0
        self.finished = False
        self.redraws = 0

    def display(self) -> None:
        """Nothing to set up: the first `update` prints."""

    def update(self) -> None:
        """Print the table if ``min_interval_s`` passed and the model changed;
        otherwise return at once (two comparisons)."""
        now = self._clock()
        if now - self._last < self.min_interval_s or self.progress.version == self._printed_version:
            return
        with self._lock:
            if self.finished:
                return
            self._last = now
            self._print(self.max_rows, final=False)

    def finish(self) -> None:
        """Print the final table, errors and notes (once)."""
        with self._lock:
            if self.finished:
                return
            self.finished = True
            self.progress.end()
            self._print(self.final_rows, final=True)

    def _print(self, max_rows: int | None, final: bool) -> None:
        p = self.progress.frame()  # the status line and the table from one read of the trials
        self._printed_version = p.version
        notes = p.notes
        lines = [f"note: {n}" for n in notes[self._printed_notes :]]  # each note once
        self._printed_notes = len(notes)
        lines.append(f"== Tune {'finished' if final else 'running'}: {p.status_line()} ==")
        lines.append(p.text_table(max_rows))
        if final:
            lines += [f"error {t}: {_one_line(err)}" for t, err in p.errors]
        stream = self._stream if self._stream is not None else sys.stdout
        stream.write("\n".join(lines) + "\n")
        stream.flush()
        self.redraws += 1


__all__ = ["TuneTableText"]
