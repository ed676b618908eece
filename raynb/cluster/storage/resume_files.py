"""What resuming a run reads of its directory, read before the run is created.

A resumed run continues its files: later reports append to ``result.json`` after its
rows, and ``progress.csv`` is written again from them (it may lack the last ones, had
the head stopped before writing them). Both grow with the run's length (a week-long run
reports hundreds of thousands of rows), so the head reads them on a thread off its loop
(``cluster/head/run_resume.py``) and hands the result to :meth:`RunDirectory.load_existing`,
which only adopts it.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path

from .private_files import aside, private_opener, writing
from .rundir import read_reports, read_run_dir


@dataclass
class ResumedFiles:
    """A resumable run's files as read: ``previous`` (``run.json``'s record, as
    :func:`read_run_dir` gives it), ``rows`` (``result.json``'s, oldest first) and
    ``columns`` (``progress.csv``'s header, as rewritten)."""

    previous: dict
    rows: list[dict] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)


def read_for_resume(path) -> ResumedFiles:
    """Read a run directory to resume it, and write its ``progress.csv`` again from every
    row of ``result.json`` (written aside, then renamed in: a reader never sees it torn).

    Raises:
        CorruptRunDirectory: ``run.json``, ``params.json`` or ``result.json`` cannot be read.
        FileNotFoundError: ``path`` is not a directory.
        RunFileError: ``progress.csv`` cannot be written (naming it).
    """
    previous = read_run_dir(path, with_reports=False)
    p = Path(path).expanduser()
    rows = read_reports(p)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    if rows:
        _write_table(os.path.join(p, "progress.csv"), columns, rows)
    return ResumedFiles(previous, rows, columns)


def _write_table(path: str, columns: list[str], rows: list[dict]) -> None:
    target = aside(path)
    with writing(path):
        with open(target, "w", newline="", opener=private_opener) as f:
            writer = csv.DictWriter(f, columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        os.replace(target, path)
