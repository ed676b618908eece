"""A trial's reports: the newest few in the driver's memory, the rest read from its directory.

A sweep of thousands of trials with hundreds of reports each held every report in the
driver. The trial's run writes every rank-0 report to ``<trial dir>/result.json`` anyway
(the head, in order, never rewound), so :class:`ReportHistory` keeps only the last
:data:`WINDOW` reports and the count, and reads the older ones back from that file when an
API asks for the whole history (``ResultGrid``'s ``metrics_dataframe``, ``get_best_result``
scopes over all reports, a restore's replay), as Ray's ``Result.metrics_dataframe`` reads
``progress.csv``. A trial without a directory, or whose ``result.json`` this process
does not see, keeps everything in memory.

The file can hold more rows than the trial accepted: reports a run made after a
scheduler's STOP (they raced the cancel) are not the trial's in Ray. The driver cuts the
trial's files back to what it accepted when such a trial ends (:func:`truncate_reports`),
so the files, the in-memory view and every API agree.
"""

from __future__ import annotations

import csv
import io
import os
import time
from collections import deque
from pathlib import Path

# What the schedulers and APIs read from memory: the last report, ``last-10-avg``.
WINDOW = 16
# The head writes report rows in batches; a burst of reports can be in memory before its
# rows are on disk. How long a full read waits for them.
DISK_WAIT_S = 2.0


class ReportHistory:
    """A trial's reports, oldest first, as a read-only list plus :meth:`append`.

    ``len()``, ``bool()``, ``[-1]`` (and any index within the last :data:`WINDOW`) are
    answered from memory; iteration, slices and older indexes read the trial's
    ``result.json`` (each row with the trial's ``trial_id``, as the driver received it).

    Args:
        rows (iterable[dict]): reports to start with (all kept in memory until the trial
            has a directory).
    """

    __slots__ = ("_count", "_recent", "_owner", "_spill")

    def __init__(self, rows=()):
        self._recent: deque = deque(rows)
        self._count = len(self._recent)
        self._owner = None  # the Trial: its path and trial_id, read when needed
        self._spill: bool | None = None  # its result.json is seen here (None: not looked yet)

    def bind(self, owner) -> None:
        """Tie to the trial whose ``path`` holds the older reports."""
        self._owner = owner
        self._spill = None
        self._trim()

    def _path(self) -> str | None:
        return getattr(self._owner, "path", None)

    def _trim(self) -> None:
        if len(self._recent) <= WINDOW:
            return
        if self._spill is None:
            # A driver that does not see the run's directory (a client on another machine
            # without the shared storage) keeps every report, as before.
            path = self._path()
            self._spill = bool(path) and os.path.exists(os.path.join(path, "result.json"))
        if self._spill:
            while len(self._recent) > WINDOW:
                self._recent.popleft()

    def append(self, row: dict) -> None:
        self._recent.append(row)
        self._count += 1
        self._trim()

    def clear(self) -> None:
        self._recent.clear()
        self._count = 0

    @property
    def recent(self) -> list[dict]:
        """The newest reports, those in memory (all of them while they are few)."""
        return list(self._recent)

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __getitem__(self, i):
        if isinstance(i, int):
            n = self._count
            j = i + n if i < 0 else i
            if not 0 <= j < n:
                raise IndexError("report index out of range")
            held = len(self._recent)
            if j >= n - held:
                return self._recent[j - (n - held)]
        return self.full()[i]

    def __iter__(self):
        return iter(self.full())

    def __eq__(self, other) -> bool:
        if isinstance(other, (list, ReportHistory)):
            return self.full() == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"ReportHistory({self._count} reports, {len(self._recent)} in memory)"

    def full(self) -> list[dict]:
        """Every report, oldest first (a new list)."""
        older = self._count - len(self._recent)
        if older <= 0:
            return list(self._recent)
        return _read_rows(self._path(), older, getattr(self._owner, "trial_id", None)) + list(self._recent)


def _read_rows(path: str | None, n: int, trial_id: str | None) -> list[dict]:
    """The first ``n`` rows of ``<path>/result.json``, waiting up to :data:`DISK_WAIT_S`
    for rows the head has not written yet.

    Raises:
        RuntimeError: fewer than ``n`` rows are there (the directory was removed or changed
            behind the trial), naming the file.
    """
    from ..cluster.storage.rundir import CorruptRunDirectory, read_reports

    deadline = time.monotonic() + DISK_WAIT_S
    while True:
        try:
            rows = read_reports(Path(path)) if path else []
        except CorruptRunDirectory:
            rows = []
        if len(rows) >= n or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    if len(rows) < n:
        raise RuntimeError(
            f"{path}/result.json holds {len(rows)} reports where the trial had {n} before its "
            "newest ones: the trial's directory was removed or rewritten while the experiment "
            "was open. Keep trial directories until the ResultGrid is no longer used"
        )
    rows = rows[:n]
    if trial_id is not None:
        for r in rows:
            r.setdefault("trial_id", trial_id)
    return rows


def truncate_reports(path: str | None, keep: int) -> None:
    """Cut ``<path>/result.json`` and ``progress.csv`` to their first ``keep`` reports (what
    the trial accepted), each file replaced whole. Nothing to do when they hold no more."""
    if not path:
        return
    result = Path(path) / "result.json"
    try:
        lines = result.read_text().splitlines(keepends=True)
    except OSError:
        return
    if len(lines) <= keep:
        return
    _replace(result, "".join(lines[:keep]))
    progress = Path(path) / "progress.csv"
    try:
        with open(progress, newline="") as f:
            records = list(csv.reader(f))
    except OSError:
        return
    if len(records) > keep + 1:  # the header, then one record a report
        buf = io.StringIO(newline="")
        csv.writer(buf).writerows(records[: keep + 1])  # the head's DictWriter's dialect
        _replace(progress, buf.getvalue())


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".cut")
    mode = os.stat(path).st_mode & 0o777
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", newline="") as f:
        f.write(text)
    os.replace(tmp, path)
