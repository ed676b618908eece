"""The data behind Tune's trial table, kept apart from any display.

`TuneProgress` is what the Tuner driver feeds (trials added, status changes,
reports, workers in use, notes); the views read it: `trial_table_widget.TuneTablePane`
(Jupyter) and `trial_table_text.TuneTableText` (terminal); `display.tune_display`
picks one.
Nothing here imports ipywidgets or IPython; pandas formats the text table and
matplotlib (Agg canvas, no pyplot) draws the metric curves.

Trials are ranked by the *latest* value of the metric, as Ray Tune's reporter
and ``ResultGrid.get_best_result(scope="last")`` rank them, so the highlighted
trial is the one `get_best_result()` returns: the header names it "best trial ...
by last result" and gives its two values under their columns' names, ``<metric>`` (the
last) and ``max <metric>`` (``min <metric>`` for mode min: the best it ever reported), so
a header value that goes down during a run is not read as the max beside it.
"""

from __future__ import annotations

import copy
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ...train.experiment_callback import flatten as callback_flatten
from ..formatting import as_number, fmt_duration, fmt_value
from . import render as _render
from .index import TrialIndex
from .render import STATUS_COLOURS, STATUSES, _param_labels

# A trial's curve keeps at most this many points (+1): a plot a few hundred pixels wide shows
# no more, and a sweep of long trials held one per report of each in the notebook's driver.
SERIES_POINTS = 256

# Rows of the summary a finished sweep leaves in the notebook: the live table's.
SUMMARY_ROWS = 30


def flatten(config: Any) -> dict[str, Any]:
    """A trial's config as the table's columns: nested dicts as one level with ``/``-joined
    keys (:func:`raynb.train.experiment_callback.flatten`); a config that is not a dict is one column."""
    return callback_flatten(config) if isinstance(config, dict) else {"config": config}


@dataclass
class TrialRow:
    """One trial as the table shows it (a snapshot; views may keep it).

    Attributes:
        trial_id (str), status (str), error (str | None): as the driver set them.
        config (dict): the flattened config (``a/b`` keys).
        iteration (int): the newest ``training_iteration`` (0 before any report).
        time_total_s (float | None): seconds of training, from the newest report.
        latest (float | None), best (float | None): the metric's newest and best
            (mode-aware) values; None before the trial reported it.
        series (list[tuple[int, float]]): (training_iteration, metric) of the reports, all
            of them up to ``SERIES_POINTS``; past that, every other one of the older (the
            plot's curve: its memory must not grow with a long trial's reports).
        order (int): when the trial was added (0 = first).
    """

    trial_id: str
    config: dict
    order: int
    status: str = "PENDING"
    error: str | None = None
    iteration: int = 0
    time_total_s: float | None = None
    latest: float | None = None
    best: float | None = None
    series: list = field(default_factory=list)
    reports: int = 0
    early_stopped: bool = False  # TERMINATED by a scheduler / stopper before its budget (grey curve)

    def snapshot(self) -> "TrialRow":
        return TrialRow(
            self.trial_id,
            dict(self.config),
            self.order,
            self.status,
            self.error,
            self.iteration,
            self.time_total_s,
            self.latest,
            self.best,
            list(self.series),
            self.reports,
            self.early_stopped,
        )


class TuneProgress:
    """Everything the trial table shows about one Tune experiment.

    Args:
        metric (str | None): the metric trials are ranked by (``TuneConfig.metric``);
            None shows no metric columns and keeps trials in the order they came.
        mode (str | None): ``"min"`` or ``"max"``; None ranks nothing.
        total_workers (int): workers the experiment may use at once.
        param_keys (list[str]): the config keys shown as columns, flattened with
            ``/`` (``"model/width"``); empty: every key of every trial's config.
        clock: wall time in seconds (``time.time``), injectable for tests.

    Raises:
        ValueError: ``mode`` is not None, "min" or "max".

    Written by the driver (any thread): `add_trial`, `set_status`, `add_result`,
    `set_workers`, `note`. Read by the views: `rows`, `best_trial_id`, `counts`,
    `elapsed_s`, `workers`, `notes`, `errors`, `version`, `status_line`,
    `text_table`, `html_table`, `plot_png`, `summary_html`, `summary_text`.
    """

    def __init__(
        self,
        metric: str | None,
        mode: str | None,
        total_workers: int,
        param_keys: Iterable[str] = (),
        clock: Callable[[], float] = time.time,
    ):
        if mode not in (None, "min", "max"):
            raise ValueError(f"mode must be 'min', 'max' or None, got {mode!r}")
        self.metric = metric
        self.mode = mode if metric else None
        self.param_keys = [str(k) for k in (param_keys or ())]
        self._clock = clock
        self._lock = threading.RLock()  # the driver writes while a timer thread may read
        self._trials: dict[str, TrialRow] = {}
        self._index = TrialIndex(self.mode)  # order and counts, so a redraw reads only what it shows
        self._seen_keys: dict[str, None] = {}  # every flattened config key, first seen first
        self._in_use = 0
        self._total = max(0, int(total_workers))
        self.cpus_per_worker: int | None = None  # set_trial_resources
        self._notes: list[str] = []
        self.started_at = clock()
        self.ended_at: float | None = None
        self.version = 0  # bumped by every change: views redraw only when it moved
        self.results_version = 0  # bumped by reports and status changes: the plot's input

    # ------------------------------------------------------------- writes
    def add_trial(self, trial_id: str, config: dict) -> None:
        """A new trial, PENDING. Called again for a known trial, it replaces the
        trial's config (PBT's explore step changes it) and keeps the rest."""
        with self._lock:
            row = self._trials.get(trial_id)
            if row is None:
                row = self._new_row(trial_id, flatten(config or {}))
            else:
                row.config = flatten(config or {})
            self._seen_keys.update(dict.fromkeys(row.config))
            self.version += 1

    def set_status(
        self, trial_id: str, status: str, error: str | None = None, early_stopped: bool = False
    ) -> None:
        """``status``: PENDING, RUNNING, PAUSED, TERMINATED, STOPPED or ERROR;
        ``error``: one line saying why, for ERROR; ``early_stopped``: a TERMINATED trial
        stopped before its budget (its curve is drawn as a stopped one).

        Raises:
            ValueError: an unknown status."""
        status = str(status).upper()
        if status not in STATUS_COLOURS:
            raise ValueError(f"unknown trial status {status!r}; expected one of {', '.join(STATUSES)}")
        with self._lock:
            row = self._row(trial_id)
            self._set_status(row, status)
            row.early_stopped = bool(early_stopped)
            row.error = str(error) if error is not None else (row.error if status == "ERROR" else None)
            self.version += 1
            self.results_version += 1

    def add_result(self, trial_id: str, metrics: dict) -> None:
        """One report of the trial: ``training_iteration`` (counted when
        missing), ``time_total_s`` (seconds) and, usually, the metric."""
        if not isinstance(metrics, dict):
            return
        with self._lock:
            row = self._row(trial_id)
            row.reports += 1
            it = as_number(metrics.get("training_iteration"))
            row.iteration = int(it) if it is not None else row.reports
            t = as_number(metrics.get("time_total_s"))
            if t is not None:
                row.time_total_s = float(t)
            if row.status == "PENDING":  # a report proves it runs
                self._set_status(row, "RUNNING")
            value = as_number(metrics.get(self.metric)) if self.metric else None
            if value is not None:
                old, row.latest = row.latest, value
                self._index.latest_changed(row, old)
                row.series.append((row.iteration, value))
                if len(row.series) > SERIES_POINTS:
                    row.series = row.series[::2]  # keeps the first and this newest point
                if row.best is None or self._better(value, row.best):
                    row.best = value
            self.version += 1
            self.results_version += 1

    def set_workers(self, in_use: int, total: int) -> None:
        """Workers busy with trials now, out of ``total``."""
        with self._lock:
            if (in_use, total) != (self._in_use, self._total):
                self._in_use, self._total = max(0, int(in_use)), max(0, int(total))
                self.version += 1

    def set_trial_resources(self, cpus_per_worker: int | None) -> None:
        """The CPUs each trial's ranks asked for (``tune.with_resources({"cpu": N})``):
        shown in the status line beside the workers in use; None: not asked."""
        with self._lock:
            self.cpus_per_worker = cpus_per_worker
            self.version += 1

    def note(self, text: str) -> None:
        """A line shown under the table (e.g. 'PBT: trial 3 copies trial 1')."""
        with self._lock:
            self._notes.append(str(text))
            self.version += 1

    def end(self) -> None:
        """Freeze the elapsed time (the views call it when tuning ends)."""
        with self._lock:
            if self.ended_at is None:
                self.ended_at = self._clock()
                self.version += 1

    def _row(self, trial_id: str) -> TrialRow:
        row = self._trials.get(trial_id)
        if row is None:  # status or report before add_trial: show it rather than drop it
            row = self._new_row(trial_id, {})
        return row

    def _new_row(self, trial_id: str, config: dict) -> TrialRow:
        row = self._trials[trial_id] = TrialRow(str(trial_id), config, len(self._trials))
        self._index.added(row)
        return row

    def _set_status(self, row: TrialRow, status: str) -> None:
        old, row.status = row.status, status
        self._index.status_changed(row, old)

    def _better(self, a: float, b: float) -> bool:
        return a > b if self.mode == "max" else a < b

    # ------------------------------------------------------------- reads
    def frame(self) -> "TuneProgress":
        """A copy whose trials, notes and counters are frozen as they are now (the
        clock still runs, for the elapsed time): one frame's header, table and plot
        drawn from it agree, whatever the driver adds meanwhile. Mid-run, the legend's
        best trial was once not the table's ★ row, and the best curve lagged its iter."""
        with self._lock:
            frozen = copy.copy(self)
            frozen._trials = {k: r.snapshot() for k, r in self._trials.items()}
            frozen._notes = list(self._notes)
        frozen._lock = threading.RLock()
        return frozen

    def rows(self) -> list[TrialRow]:
        """Snapshots of every trial, best first: trials with a metric value by
        their latest value (ascending for min, descending for max), then the
        rest in the order they were added. Without a mode: added order."""
        with self._lock:
            return [self._trials[t].snapshot() for t in self._index.in_table_order()]

    @property
    def best_trial_id(self) -> str | None:
        """The trial with the best latest metric value (None without metric/mode or values)."""
        with self._lock:
            return self._index.best_id()

    @property
    def counts(self) -> dict[str, int]:
        """status -> number of trials, for the statuses present, in `STATUSES` order."""
        with self._lock:
            counts = self._index.counts
            return {s: counts[s] for s in STATUSES if counts[s] > 0}

    @property
    def num_trials(self) -> int:
        return len(self._trials)

    @property
    def workers(self) -> tuple[int, int]:
        """(in use, total)."""
        with self._lock:
            return self._in_use, self._total

    @property
    def elapsed_s(self) -> float:
        """Seconds since the model was made; frozen by `end`."""
        with self._lock:
            end = self.ended_at if self.ended_at is not None else self._clock()
        return max(0.0, end - self.started_at)

    @property
    def notes(self) -> list[str]:
        with self._lock:
            return list(self._notes)

    @property
    def errors(self) -> list[tuple[str, str]]:
        """(trial_id, error line) of the ERROR trials, in added order."""
        with self._lock:
            rows = sorted((self._trials[t] for t in self._index.errors), key=lambda r: r.order)
            return [(r.trial_id, r.error or "failed") for r in rows]

    def shown_param_keys(self) -> list[str]:
        """The config columns: `param_keys`, or every flattened key seen."""
        if self.param_keys:
            return list(self.param_keys)
        with self._lock:
            return list(self._seen_keys)

    # ------------------------------------------------------------- the table
    def dataframe(self, rows: list[TrialRow] | None = None):
        """The table as a ``pandas.DataFrame`` with raw values, best first:
        ``trial_id``, ``status``, one column per config key (the common
        ``train_loop_config/`` prefix dropped), ``iter``, ``time (s)``, then
        the metric's latest value (``<metric>``) and the best it ever reported
        (``max <metric>`` or ``min <metric>``, by the mode)."""
        import pandas as pd

        rows = self.rows() if rows is None else rows
        keys = self.shown_param_keys()
        labels = _param_labels(keys)
        data: dict[str, list] = {"trial_id": [r.trial_id for r in rows], "status": [r.status for r in rows]}
        for k, label in zip(keys, labels):
            data[label] = [r.config.get(k) for r in rows]
        data["iter"] = [r.iteration for r in rows]
        data["time (s)"] = [r.time_total_s for r in rows]
        if self.metric:
            data[self.metric] = [r.latest for r in rows]
            if self.mode:
                data[self.best_column] = [r.best for r in rows]
        df = pd.DataFrame(data)
        # float64 with NaN for "not reported yet": all-None columns would print "None".
        for c in list(df.columns)[2 + len(keys) + 1 :]:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
        return df

    def status_line(self) -> str:
        """E.g. ``16 trials: 4 RUNNING, 10 TERMINATED, 2 STOPPED | 12.3s | workers 4/4 |
        best trial 3f2a_00004 by last result: val_loss 0.1234 (min val_loss 0.1201)``: the
        ranking's scope named (each trial's last result, as ``get_best_result()``), and each
        value by its column's name (the last value; the best it ever reported)."""
        counts = self.counts
        n = self.num_trials
        parts = [
            f"{n} trial{'s' if n != 1 else ''}"
            + (": " + ", ".join(f"{c} {s}" for s, c in counts.items()) if counts else ""),
            fmt_duration(self.elapsed_s),
        ]
        in_use, total = self.workers
        parts.append(f"workers {in_use}/{total}" + self.cpus_text)
        best = self.best_trial_id
        if best is not None:
            row = self._trials[best]
            parts.append(
                f"best trial {best} by last result: {self.metric} {fmt_value(row.latest)}"
                f" ({self.best_column} {fmt_value(row.best)})"
            )
        return " | ".join(parts)

    @property
    def cpus_text(self) -> str:
        """`` (2 CPUs each)`` when the trials asked for CPUs, else empty."""
        n = self.cpus_per_worker
        return f" ({n} CPU{'s' if n != 1 else ''} each)" if n else ""

    @property
    def best_column(self) -> str:
        """The column of the best value each trial ever reported: 'max acc', 'min loss'."""
        return f"{self.mode} {self.metric}"

    def select_rows(self, max_rows: int | None) -> tuple[list[TrialRow], dict[str, int]]:
        """The rows a size-limited view shows, and the counts per status of the
        rest. The best trial and the RUNNING ones come first, then the best of
        the others; the shown rows keep the table's order."""
        with self._lock:
            if max_rows is None or len(self._trials) <= max_rows:
                return self.rows(), {}
            index = self._index
            best = index.best_id()
            chosen: dict[str, None] = {best: None} if best is not None else {}
            running = sorted((self._trials[t] for t in index.running), key=index.sort_key)
            for tid in itertools.chain((r.trial_id for r in running), index.in_table_order()):
                if len(chosen) >= max_rows:
                    break
                chosen[tid] = None
            rows = sorted((self._trials[t].snapshot() for t in chosen), key=index.sort_key)
            hidden = dict(index.counts)
        for r in rows:
            hidden[r.status] -= 1
        return rows, {s: hidden[s] for s in STATUSES if hidden.get(s, 0) > 0}

    def text_table(self, max_rows: int | None = None) -> str:
        """The table as aligned text (pandas ``to_string``); the best trial's
        row starts with ``*``; past ``max_rows``, a last line counts the rest."""
        return _render.text_table(self, max_rows)

    def html_table(self, max_rows: int | None = None) -> str:
        """The table as a static HTML ``<table>`` with inline styles (they
        survive JupyterLab's and nbconvert's table CSS): statuses coloured, the
        best trial's row shaded and marked ★."""
        return _render.html_table(self, max_rows)

    def header_html(self) -> str:
        """The status line as HTML, with the counts in their statuses' colours."""
        return _render.header_html(self)

    def errors_html(self) -> str:
        """"""
        return _render.errors_html(self)

    def notes_html(self, last: int | None = None) -> str:
        """"""
        return _render.notes_html(self, last)

    def plot_png(self, size_in: tuple[float, float] = (5.2, 3.0), dpi: int = 160) -> bytes | None:
        """The metric against ``training_iteration`` for every trial, as PNG
        bytes: STOPPED trials grey, ERROR ones dashed red, the best trial thick
        and on top; None without a metric, without points, or without matplotlib.

        Uses a bare ``Figure`` on the Agg canvas (no pyplot, so the user's
        backend and figure list are untouched and any thread may call it)."""
        return _render.plot_png(self, size_in, dpi)

    def summary_html(self, plot: bool = True, max_rows: int | None = SUMMARY_ROWS) -> str:
        """A self-contained HTML summary (no widgets, no scripts) for the
        notebook's saved output: the status line, the rows a live table of
        ``max_rows`` shows (the best and RUNNING trials first, the rest counted
        by status; None: every trial's row), errors, notes, and the curves as an
        inline base64 PNG when ``plot``. Its size does not grow with the trials:
        every trial's row is in ``ResultGrid.get_dataframe()``."""
        return _render.summary_html(self, plot, max_rows)

    def summary_text(self, max_rows: int | None = 50) -> str:
        """The status line, the table (``max_rows`` at most), errors and notes."""
        return _render.summary_text(self, max_rows)


__all__ = ["TuneProgress", "TrialRow", "flatten", "STATUSES"]
