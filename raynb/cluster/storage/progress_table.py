"""A run's ``progress.csv``: its reports as a table, one column per metric.

A CSV's header comes first, so a metric first reported after the first row means the file
is written again, whole, with the wider header. Rewriting it at every such report made a
run whose reports each bring a new key (``report({f"loss_{epoch}": ...})``) cost the head
time cubic in its reports: thousands of them held the head's one thread for minutes, a
single write long enough for node agents to take the head for dead
(``benchmarks/progress_csv.py`` measures it). So, bounded:

- a rewrite happens at most once every ``REWRITE_EVERY_S`` (and never more often than ten
  times its own duration); the rows reported meanwhile wait for it, and the run's end
  writes whatever waits. ``result.json`` is written at once, whatever this file does.
- a new column is added while the table has at most ``MAX_REWRITE_CELLS`` cells (rows
  times columns); later new metrics are left out of this file (as Ray Tune's CSV logger
  leaves out every key its first row lacked), and ``result.json`` keeps them.
"""

from __future__ import annotations

import csv
import logging
import os
import time

from .private_files import private_opener, writing

log = logging.getLogger("raynb.head")

REWRITE_EVERY_S = 1.0
# ... and after a rewrite, the next waits this many times as long as it took (at most a
# tenth of the head's time goes to rewriting, however big the table).
REWRITE_GAP_FACTOR = 10
# A rewrite of at most this many cells is short next to the head's budget (progress_csv.py).
MAX_REWRITE_CELLS = 1_000_000


class ProgressTable:
    """Args: path (str): the run's ``progress.csv``."""

    def __init__(self, path: str):
        self.path = path
        self.columns: list[str] = []
        self.left_out: set[str] = set()  # metrics this file does not show (result.json does)
        self._file = None
        self._writer = None
        self._stale = False  # the file lacks columns or rows: rewrite it
        self._rewrite_due = 0.0  # monotonic s

    def load(self, rows: list[dict]) -> None:
        """A resumed run's rows: the file is written again from them at the next write (it may
        lack the last ones, had the head stopped before writing them)."""
        for row in rows:
            self.columns += [k for k in row if k not in self.columns]
        self._stale = bool(rows)

    def adopt(self, columns: list[str]) -> None:
        """A resumed run's table, written again already (``resume_files``) with these
        columns: later rows are appended to it."""
        self.columns = list(columns)
        self._stale = False

    def write(self, new_rows: list[dict], all_rows: list[dict], final: bool = False) -> None:
        """Add ``new_rows`` (the last of ``all_rows``, every row of the run).

        Raises:
            RunFileError: the file cannot be written (naming it)."""
        fresh = list(
            dict.fromkeys(
                k for row in new_rows for k in row if k not in self.columns and k not in self.left_out
            )
        )
        if fresh:
            if not self.columns or len(all_rows) * (len(self.columns) + len(fresh)) <= MAX_REWRITE_CELLS:
                self.columns += fresh
                self._stale = True
            else:
                if not self.left_out:
                    log.warning(
                        "%s: metrics first reported after %d rows (%s...) are left out of "
                        "progress.csv, so that it is not rewritten whole again; result.json has "
                        "them",
                        os.path.dirname(self.path),
                        len(all_rows) - len(new_rows),
                        fresh[0],
                    )
                self.left_out.update(fresh)
        with writing(self.path):
            if self._stale:
                now = time.monotonic()
                if final or now >= self._rewrite_due:
                    self._rewrite(all_rows)
                    took = time.monotonic() - now
                    self._rewrite_due = now + max(REWRITE_EVERY_S, REWRITE_GAP_FACTOR * took)
            elif new_rows:
                if self._file is None:
                    self._open("a")
                self._writer.writerows(new_rows)
                self._file.flush()

    @property
    def waiting(self) -> bool:
        """Rows wait for a rewrite (the head's tick asks again)."""
        return self._stale

    def _open(self, mode: str) -> None:
        self._file = open(self.path, mode, newline="", opener=private_opener)
        self._writer = csv.DictWriter(self._file, self.columns, extrasaction="ignore")

    def _rewrite(self, rows: list[dict]) -> None:
        if self._file is not None:
            self._file.close()
        # Written in place and cut after (not "w"): the file prepare_files made, its inode kept.
        self._open("r+" if os.path.exists(self.path) else "w")
        old_bytes = os.fstat(self._file.fileno()).st_size
        self._writer.writeheader()
        self._writer.writerows(rows)
        if old_bytes:
            self._file.truncate()
        self._file.flush()
        self._stale = False

    def close(self) -> None:
        f, self._file, self._writer = self._file, None, None
        if f is not None:
            with writing(self.path):
                f.close()
