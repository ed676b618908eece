"""The data behind a run's progress pane, kept apart from any display.

`RunProgress` folds the run's event stream (state changes, ``report`` calls,
resource samples, worker output, notes) into a small state that the views in
``widgets.py`` (Jupyter) and ``text_progress.py`` (terminal) read. Nothing here
imports ipywidgets or IPython, so the model is testable on its own; matplotlib
is imported only when a loss-curve PNG is asked for.

Events are dicts with a ``"kind"`` key; see `RunProgress.on_event`. Events come
from the network, so junk (missing keys, non-numeric values, unknown ranks or
kinds, events out of order) is tolerated, never raised on.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import deque
from typing import Any, Callable, Iterable

from ..formatting import (
    BOOKKEEPING_KEYS,
    KNOWN_STATES,
    LOSS_KEYS,
    OUTPUT_TAIL_LINES,
    TERMINAL_STATES,
    as_number,
    fmt_bytes,
    fmt_duration,
    fmt_range,
    fmt_value,
    split_metrics,
)


# ----------------------------------------------------------------- the model
class RunProgress:
    """Everything the progress views show about one run.

    Args:
        run_name: shown in the header.
        world_size: number of ranks (one progress bar each).
        total_epochs: epochs the run will do (``--epochs`` or
            ``config["epochs"]``), or None when unknown; reports carrying an
            ``"epoch"`` key are then measured against it.
        metric_keys: metrics shown first, and tried first for the plotted curve.
        clock: returns wall time in seconds (``time.time``); only used for the
            elapsed time of a running run and for events without a ``"time"``.
        error_raised: a ``RunError`` that names the failure is raised after the run
            (``fit()``, ``%%ray_train``): the views leave the error out (`error_text`
            is None) rather than show it a second and third time.

    Read by the views (all safe to read from another thread):
        run_name, world_size, total_epochs, state, message, error, error_text, elapsed_s,
        ranks, rank_progress, latest_metrics, history, worker_stats, notes,
        restarts, output_tail, loss_series(), summary_lines(), summary_html().
    """

    def __init__(
        self,
        run_name: str,
        world_size: int,
        total_epochs: int | None = None,
        metric_keys: Iterable[str] = ("loss",),
        clock: Callable[[], float] = time.time,
        error_raised: bool = False,
    ):
        self.run_name = str(run_name)
        self.error_raised = bool(error_raised)
        self.world_size = max(0, int(world_size))
        n = as_number(total_epochs)
        self.total_epochs = int(n) if n is not None and n > 0 else None
        self.metric_keys = tuple(metric_keys)
        self._clock = clock
        # The client's event thread writes while the notebook's thread may read.
        self._lock = threading.RLock()
        self.state = "PENDING"
        self.message: str | None = None
        self.error: str | None = None
        self.started_at: float | None = None  # wall time of the first RUNNING
        self.ended_at: float | None = None  # wall time of the terminal state
        self._elapsed_shown = 0.0  # the most elapsed_s has returned
        # rank -> (iteration, done, total, unit) of the newest report seen
        self._progress: dict[int, tuple[int, int, int | None, str]] = {}
        self._report_counts: dict[int, int] = {}
        self._latest: dict[str, Any] = {}
        self._latest_iter = -1
        self._history: list[tuple[float, dict]] = []
        self._stats: dict[int, dict] = {}
        self._stats_time: dict[int, float] = {}
        self.peak_rss: dict[int, int] = {}
        self.peak_gpu_mem: dict[int, int] = {}  # bytes, where NVML saw the rank on a GPU
        self._notes: list[str] = []
        self._output: dict[int, deque] = {}
        self.report_count = 0  # all ranks; views use it to see whether anything changed
        self.latest_checkpoint: str | None = None  # name of the newest committed checkpoint
        self.checkpoint_count = 0

    # ------------------------------------------------------------- events
    def on_event(self, event: dict) -> None:
        """Fold one event into the state. Unknown kinds and malformed events
        are ignored. Kinds:

        - ``state``: ``{"state": "PENDING"|"RUNNING"|"FINISHED"|"FAILED"|"CANCELLED", "message": str?}``
        - ``report``: ``{"rank": int, "metrics": dict}``; metrics may hold
          ``epoch`` (0-based), ``step`` (0-based), ``training_iteration`` (1-based).
        - ``stats``: ``{"workers": {rank: {"pid": int, "cpu_percent": float, "rss": bytes}}}``
        - ``progress``: ``{"ranks": {rank: {"reports": int, "epoch"?: int, "step"?: int}}}``:
          how far the other ranks got (the head relays only rank 0's reports whole)
        - ``output``: ``{"rank": int, "stream": str, "text": str}`` (a tail is kept)
        - ``note``: ``{"text": str}`` (e.g. a restart)
        - ``checkpoint``: ``{"name": "checkpoint_000004", ...}`` (one was committed)

        All may carry ``"time"`` (wall seconds, ``time.time()``).
        """
        if not isinstance(event, dict):
            return
        t = as_number(event.get("time"))
        t = float(t) if t is not None else self._clock()
        handler = {
            "state": self._on_state,
            "report": self._on_report,
            "progress": self._on_progress,
            "stats": self._on_stats,
            "output": self._on_output,
            "note": self._on_note,
            "checkpoint": self._on_checkpoint,
        }.get(event.get("kind"))
        if handler is None:
            return
        with self._lock:
            handler(event, t)

    def _on_state(self, ev: dict, t: float) -> None:
        state = str(ev.get("state", "")).upper()
        if state not in KNOWN_STATES or self.state in TERMINAL_STATES:
            return  # the first terminal state wins; a late RUNNING must not revive a run
        msg = ev.get("message")
        self.message = str(msg) if msg is not None else None
        if state == "RUNNING":
            self._mark_started(t)
        elif state in TERMINAL_STATES:
            self.ended_at = t
            if state == "FAILED":
                self.error = self.message or "failed"
        self.state = state

    def _mark_started(self, t: float) -> None:
        if self.started_at is None or t < self.started_at:
            self.started_at = t
        if self.state == "PENDING":
            self.state = "RUNNING"

    def _on_report(self, ev: dict, t: float) -> None:
        rank = _as_rank(ev.get("rank"))
        metrics = ev.get("metrics")
        if rank is None or not isinstance(metrics, dict):
            return
        if self.state not in TERMINAL_STATES:
            self._mark_started(t)  # a report proves the run is running
        self.report_count += 1
        count = self._report_counts[rank] = self._report_counts.get(rank, 0) + 1
        it = as_number(metrics.get("training_iteration"))
        it = int(it) if it is not None else count
        prev = self._progress.get(rank)
        if prev is None or it >= prev[0]:  # an older report arriving late changes nothing
            self._progress[rank] = (it, *self._done_of(metrics, it))
        if rank == 0:
            if it >= self._latest_iter:
                self._latest, self._latest_iter = dict(metrics), it
            bisect.insort(self._history, (it, dict(metrics)), key=lambda h: h[0])

    def _on_progress(self, ev: dict, t: float) -> None:
        ranks = ev.get("ranks")
        if not isinstance(ranks, dict):
            return
        for key, entry in ranks.items():
            rank = _as_rank(key)
            count = as_number(entry.get("reports")) if isinstance(entry, dict) else None
            if rank is None or count is None or count < 1:
                continue
            count = int(count)
            if self.state not in TERMINAL_STATES:
                self._mark_started(t)
            self.report_count += max(0, count - self._report_counts.get(rank, 0))
            self._report_counts[rank] = max(count, self._report_counts.get(rank, 0))
            prev = self._progress.get(rank)
            if prev is None or count >= prev[0]:
                self._progress[rank] = (count, *self._done_of(entry, count))

    def _done_of(self, m: dict, iteration: int) -> tuple[int, int | None, str]:
        """(done, total, unit) for one report; see `rank_progress`."""
        epoch, step = as_number(m.get("epoch")), as_number(m.get("step"))
        if epoch is not None and epoch >= 0 and self.total_epochs:
            return int(epoch) + 1, self.total_epochs, "epoch"
        if step is not None and step >= 0:
            return int(step) + 1, None, "step"
        if epoch is not None and epoch >= 0:
            return int(epoch) + 1, None, "epoch"
        return max(0, iteration), None, "report"

    def _on_stats(self, ev: dict, t: float) -> None:
        workers = ev.get("workers")
        if not isinstance(workers, dict):
            return
        # Merged, not replaced: each node agent samples only its own workers.
        for key, s in workers.items():
            rank = _as_rank(key)
            if rank is None or not isinstance(s, dict) or t < self._stats_time.get(rank, -math.inf):
                continue
            pid, cpu, rss = as_number(s.get("pid")), as_number(s.get("cpu_percent")), as_number(s.get("rss"))
            self._stats[rank] = {
                "pid": int(pid) if pid is not None else None,
                "cpu_percent": float(cpu) if cpu is not None else None,
                "rss": int(rss) if rss is not None else None,
            }
            # GPU figures only where the node agent's NVML saw the rank on a GPU.
            for key in ("gpu", "gpu_util", "gpu_mem_used", "gpu_mem_total"):
                if as_number(s.get(key)) is not None:
                    self._stats[rank][key] = as_number(s.get(key))
            self._stats_time[rank] = t
            if rss is not None:
                self.peak_rss[rank] = max(self.peak_rss.get(rank, 0), int(rss))
            gpu_mem = as_number(s.get("gpu_mem_used"))
            if gpu_mem is not None:
                self.peak_gpu_mem[rank] = max(self.peak_gpu_mem.get(rank, 0), int(gpu_mem))

    def _on_output(self, ev: dict, t: float) -> None:
        rank, text = _as_rank(ev.get("rank")), ev.get("text")
        if rank is None or not isinstance(text, str):
            return
        tail = self._output.setdefault(rank, deque(maxlen=OUTPUT_TAIL_LINES))
        tail.extend(line for line in text.splitlines() if line.strip())

    def _on_checkpoint(self, ev: dict, t: float) -> None:
        name = ev.get("name")
        if isinstance(name, str):
            self.latest_checkpoint = name
            self.checkpoint_count += 1

    def _on_note(self, ev: dict, t: float) -> None:
        text = ev.get("text")
        if text is not None:
            self._notes.append(str(text))

    # ------------------------------------------------------------- reads
    @property
    def finished(self) -> bool:
        """True once a terminal state (FINISHED, FAILED, CANCELLED) arrived."""
        return self.state in TERMINAL_STATES

    @property
    def elapsed_s(self) -> float:
        """Seconds since the first RUNNING state (or first report); 0.0 before
        that; frozen at the terminal state's time once the run ended.

        Never less than it was when last read: a view that follows the run late
        (a busy notebook) showed RUNNING 10.2s, then FINISHED 9.9s, the head's
        own end time; the clock of a live view does not run backwards."""
        with self._lock:
            if self.started_at is None:
                return 0.0
            end = self.ended_at if self.ended_at is not None else self._clock()
            self._elapsed_shown = max(self._elapsed_shown, end - self.started_at)
            return self._elapsed_shown

    @property
    def ranks(self) -> list[int]:
        """0..world_size-1, plus any other rank that sent a report or stats."""
        with self._lock:
            return sorted(set(range(self.world_size)) | set(self._progress) | set(self._stats))

    @property
    def rank_progress(self) -> dict[int, tuple[int, int | None]]:
        """rank -> (done, total). ``done`` is the last epoch+1 (when
        total_epochs is known), else step+1, else the number of reports;
        ``total`` is total_epochs or None. Ranks yet to report: (0, total_epochs)."""
        with self._lock:
            return {
                r: (p[1], p[2]) if (p := self._progress.get(r)) else (0, self.total_epochs)
                for r in self.ranks
            }

    @property
    def progress_unit(self) -> str:
        """What ``done`` counts: 'epoch', 'step' or 'report' (from the newest report)."""
        with self._lock:
            newest = max(self._progress.values(), default=None, key=lambda p: p[0])
            if newest:
                return newest[3]
            return "epoch" if self.total_epochs else "report"

    @property
    def latest_metrics(self) -> dict:
        """A copy of rank 0's newest report (by training_iteration); {} before any."""
        with self._lock:
            return dict(self._latest)

    @property
    def history(self) -> list[tuple[float, dict]]:
        """(training_iteration, metrics) of every rank-0 report, in iteration order."""
        with self._lock:
            return [(x, dict(m)) for x, m in self._history]

    @property
    def worker_stats(self) -> dict[int, dict]:
        """rank -> {"pid": int, "cpu_percent": float, "rss": bytes} (latest sample;
        a field is None when the sample lacked it)."""
        with self._lock:
            return {r: dict(s) for r, s in sorted(self._stats.items())}

    @property
    def notes(self) -> list[str]:
        """Notes in arrival order (restarts, warnings from the head)."""
        with self._lock:
            return list(self._notes)

    @property
    def error_text(self) -> str | None:
        """The failure's message, for the views: None unless the FAILED state
        carried one (a bare 'failed' adds nothing to the state shown beside it),
        and None when a raised ``RunError`` shows it (``error_raised``)."""
        with self._lock:
            return self.error if self.error and self.message and not self.error_raised else None

    @property
    def restarts(self) -> int:
        """How many notes announce a restart (text starting 'restart')."""
        return sum(n.lower().startswith("restart") for n in self.notes)

    @property
    def output_tail(self) -> dict[int, list[str]]:
        """rank -> its last few non-blank output lines."""
        with self._lock:
            return {r: list(d) for r, d in sorted(self._output.items())}

    def loss_key(self, key: str = "loss") -> str | None:
        """The metric plotted by `loss_series`: the first of ``key``, the
        metric_keys, the usual loss names, then any key containing 'loss',
        that some rank-0 report gave as a number."""
        with self._lock:
            present = {k for _, m in self._history for k, v in m.items() if as_number(v) is not None}
        for k in (key, *self.metric_keys, *LOSS_KEYS):
            if k in present:
                return k
        return min((k for k in present if "loss" in k.lower()), default=None)

    def loss_series(self, key: str = "loss") -> tuple[list, list]:
        """(xs, ys): training_iteration and value of the `loss_key` metric over
        rank-0 reports, skipping reports where it is missing or not finite."""
        k = self.loss_key(key)
        if k is None:
            return [], []
        pts = [(x, as_number(m.get(k))) for x, m in self.history]
        pts = [(x, y) for x, y in pts if y is not None]
        return [x for x, _ in pts], [y for _, y in pts]

    def ordered_metrics(self, compact: bool = False) -> list[tuple[str, Any]]:
        """latest_metrics as (key, value) pairs, metric_keys first. ``compact``
        leaves out bookkeeping keys (epoch, step, training_iteration, ...)."""
        m = self.latest_metrics
        keys = [k for k in self.metric_keys if k in m] + [k for k in m if k not in self.metric_keys]
        return [(k, m[k]) for k in keys if not (compact and k in BOOKKEEPING_KEYS)]

    def progress_text(self) -> str:
        """E.g. 'epochs done 3/10' or 'steps done 120' ('epochs done 2-3/10' when ranks
        differ). A count of what is done, not an index: the report's own ``epoch`` key
        (0-based) next to 'epoch 3/10' read as a different epoch."""
        prog = self.rank_progress
        if not prog:
            return ""
        dones = [d for d, _ in prog.values()]
        lo, hi = min(dones), max(dones)
        total = next((t for _, t in prog.values() if t), None)
        span = str(hi) if lo == hi else f"{lo}-{hi}"
        return f"{self.progress_unit}s done {span}" + (f"/{total}" if total else "")

    def plot_frame(self) -> tuple[list, list, str, list[tuple[str, Any]], int]:
        """(xs, ys, loss key, ordered_metrics(), report_count) read together under the
        model's lock: the curve's last point and the metrics table beside it come from
        the same reports, whatever the event thread adds meanwhile."""
        with self._lock:
            xs, ys = self.loss_series()
            return xs, ys, self.loss_key() or "loss", self.ordered_metrics(), self.report_count

    # ------------------------------------------------------------- summaries
    def summary_lines(self) -> list[str]:
        """A plain-text summary: header, progress, final metrics, workers, notes, error."""
        lines = [
            f"[{self.run_name}] {self.state} in {fmt_duration(self.elapsed_s)}"
            + (f" | {self.progress_text()}" if self.report_count else "")
        ]
        shown, bookkeeping = split_metrics(self.ordered_metrics())
        metrics = shown + bookkeeping
        if metrics:
            lines.append("  metrics: " + " ".join(f"{k}={fmt_value(v)}" for k, v in metrics))
        stats = self.worker_stats
        if 0 < len(stats) <= 2:
            lines.append(
                "  workers: "
                + ", ".join(
                    f"rank{r} pid {s['pid']} peak {fmt_bytes(self.peak_rss.get(r))}" for r, s in stats.items()
                )
            )
        elif stats:  # one line however many ranks; the pids are in `raynb status` and the HTML summary
            peaks = {r: self.peak_rss[r] for r in stats if r in self.peak_rss}
            top = max(peaks, key=peaks.get) if peaks else None
            lines.append(
                f"  workers: {len(stats)} ranks, peak RSS {fmt_range(peaks.values(), fmt_bytes)}"
                + (f" (highest rank{top})" if top is not None and len(set(peaks.values())) > 1 else "")
            )
        if self.peak_gpu_mem:
            lines.append(f"  GPU memory: peak {fmt_range(self.peak_gpu_mem.values(), fmt_bytes)}")
        if self.latest_checkpoint:
            lines.append(f"  checkpoint: {self.latest_checkpoint} ({self.checkpoint_count} saved)")
        lines += [f"  note: {n}" for n in self.notes]
        if self.error_text:
            lines.append(f"  error: {self.error_text}")
        return lines

    def summary_html(self, plot: bool = True, png: bytes | None = None) -> str:
        """A self-contained HTML summary (no widgets, no scripts) that survives
        a reopened or exported notebook: state, elapsed, one bar per rank (with
        its pid and peak memory), the final metrics, notes, the error, and the
        loss curve as an inline base64 PNG when ``plot`` and matplotlib are
        available.

        Every element carries its own inline style, so the notebook front end's
        table styling (right-aligned, striped, padded rows in JupyterLab and
        nbconvert) does not spread it out; with styles stripped it degrades to
        plain tables. ``png``: the curve, when the caller drew it already."""
        from .summary import summary_html

        return summary_html(self, plot, png)


def _as_rank(value: Any) -> int | None:
    """A rank from an int or a numeric string (JSON turns dict keys into strings)."""
    if isinstance(value, bool):
        return None
    try:
        r = int(value)
    except (TypeError, ValueError):
        return None
    return r if r >= 0 else None
