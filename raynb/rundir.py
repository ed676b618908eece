"""A run's directory on disk, in Ray Train's layout.

``<storage_path>/<run name>/``: ``params.json`` (the run's config),
``result.json`` (one JSON object per rank-0 report), ``progress.csv`` (the same
as a table) and ``error.txt`` when the run failed.
"""
from __future__ import annotations

import csv
import datetime as _dt
import json
import os
import time
import uuid
from pathlib import Path


def default_storage_path() -> str:
    """``$RAYNB_STORAGE_PATH`` or ``~/raynb_results`` (as Ray's ``~/ray_results``)."""
    return os.environ.get("RAYNB_STORAGE_PATH") or str(Path.home() / "raynb_results")


def make_run_name(prefix: str = "TorchTrainer") -> str:
    """``<prefix>_<date>_<time>_<6 hex>``: unique even for runs started in the same second."""
    stamp = _dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    return f"{prefix}_{stamp}_{uuid.uuid4().hex[:6]}"


def _json_default(value):
    return repr(value)


class RunDirectory:
    """Writes one run's files. Args: storage_path (str), name (str, the run's directory name)."""

    def __init__(self, storage_path: str, name: str):
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"run name {name!r} is not a valid directory name")
        self.path = Path(storage_path).expanduser() / name
        self.path.mkdir(parents=True, exist_ok=True)
        self._result = None
        self._rows: list[dict] = []
        self._columns: list[str] = []
        self._last_time: float | None = None

    def write_params(self, params: dict) -> None:
        with open(self.path / "params.json", "w") as f:
            json.dump(params, f, indent=2, default=_json_default)

    def append_result(self, metrics: dict, started: float | None, t: float | None) -> dict:
        """Add Ray's automatic fields to a rank-0 report and append it to the files.

        Returns the report as written: ``metrics`` plus ``training_iteration``
        (1-based), ``timestamp`` (s since epoch), ``time_total_s`` and
        ``time_this_iter_s`` (s).
        """
        now = t or time.time()
        started = started or now
        row = dict(metrics)
        row.setdefault("training_iteration", len(self._rows) + 1)
        row["timestamp"] = now
        row["time_total_s"] = now - started
        row["time_this_iter_s"] = now - (self._last_time or started)
        self._last_time = now
        if self._result is None:
            self._result = open(self.path / "result.json", "a")
        self._result.write(json.dumps(row, default=_json_default) + "\n")
        self._result.flush()
        self._rows.append(row)
        self._write_progress(row)
        return row

    def _write_progress(self, row: dict) -> None:
        new = [k for k in row if k not in self._columns]
        path = self.path / "progress.csv"
        if new or not self._columns:
            # A new metric appeared: rewrite with the widened header.
            self._columns += new
            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, self._columns)
                w.writeheader()
                w.writerows(self._rows)
        else:
            with open(path, "a", newline="") as f:
                csv.DictWriter(f, self._columns).writerow(row)

    def write_error(self, errors: list | None) -> None:
        if not errors:
            return
        with open(self.path / "error.txt", "w") as f:
            for e in errors:
                text = (e.get("traceback") or e.get("message")) if isinstance(e, dict) else e
                f.write(f"{text}\n\n")

    def close(self) -> None:
        if self._result is not None:
            self._result.close()
            self._result = None
