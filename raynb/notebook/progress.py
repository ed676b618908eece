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

import base64
import bisect
import html
import io
import math
import threading
import time
from collections import deque
from typing import Any, Callable, Iterable

TERMINAL_STATES = frozenset({"FINISHED", "FAILED", "CANCELLED"})
KNOWN_STATES = frozenset({"PENDING", "RUNNING"}) | TERMINAL_STATES

# Tried in this order when looking for the curve to plot.
LOSS_KEYS = ("loss", "train_loss", "training_loss", "val_loss", "valid_loss",
             "validation_loss", "eval_loss", "test_loss")

# Keys that the head or the progress bars already account for; the compact
# views leave them out of the metric listing.
BOOKKEEPING_KEYS = frozenset({"epoch", "step", "training_iteration", "time_total_s",
                              "timestamp", "time_this_iter_s", "done"})
# Added to every row by the head; a wall-clock number (1.7e9) is noise in any view.
HIDDEN_KEYS = frozenset({"timestamp"})

# Terminal-state colours, shared by the live pane and the static summary.
STATE_COLOURS = {"FINISHED": "#2e7d32", "FAILED": "#c62828", "CANCELLED": "#ef6c00",
                 "RUNNING": "#1565c0", "PENDING": "#757575"}
BAR_COLOURS = {"FINISHED": "#43a047", "FAILED": "#e53935", "CANCELLED": "#fb8c00"}
MUTED = "color:#888"
PLOT_WIDTH_PX = 360    # the loss curve is drawn at 2x this, for sharp high-DPI screens

OUTPUT_TAIL_LINES = 20


# ----------------------------------------------------------------- formatting
def as_number(value: Any) -> float | int | None:
    """``value`` as a finite int/float, or None (bools, NaN, inf, strings that
    are not numbers, anything else)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def fmt_value(value: Any) -> str:
    """A metric value for display: floats to 4 significant digits."""
    if isinstance(value, float):
        if 1e4 <= abs(value) < 1e12:   # 12346, not 1.235e+04
            return f"{value:.0f}"
        return f"{value:.4g}"
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def fmt_bytes(n: Any) -> str:
    """A byte count as MiB (or GiB from 1 GiB up); '?' when not a number."""
    n = as_number(n)
    if n is None:
        return "?"
    if n >= 2 ** 30:
        return f"{n / 2 ** 30:.1f} GiB"
    return f"{n / 2 ** 20:.0f} MiB"


def fmt_range(values: Iterable, fmt: Callable[[Any], str]) -> str:
    """'257 MiB', or '250-262 MiB' when the values differ (the unit once); '?' when none."""
    vals = sorted(v for v in values if as_number(v) is not None)
    if not vals:
        return "?"
    lo, hi = fmt(vals[0]), fmt(vals[-1])
    if lo == hi:
        return lo
    (lo_num, lo_unit), (hi_num, hi_unit) = _num_unit(lo), _num_unit(hi)
    return f"{lo_num}-{hi}" if lo_unit == hi_unit and lo_num else f"{lo}-{hi}"


def _num_unit(text: str) -> tuple[str, str]:
    """'257 MiB' -> ('257', ' MiB'); '28%' -> ('28', '%')."""
    n = len(text) - len(text.lstrip("0123456789.-"))
    return text[:n], text[n:]


def fmt_duration(seconds: float) -> str:
    """Seconds as '12.3s', '4m 05s' or '1h 02m 03s'."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(seconds), 60)
    if m < 60:
        return f"{m}m {s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m {s:02d}s"


def render_curve_png(xs: list, ys: list, label: str = "loss",
                     size_in: tuple[float, float] = (4.5, 2.4), dpi: int = 160) -> bytes | None:
    """A line plot of ``ys`` against ``xs`` as PNG bytes, or None when there
    are fewer than two points or matplotlib is missing.

    The default is drawn at twice the pixels it is shown at (`PLOT_WIDTH_PX`),
    so it stays sharp on high-DPI screens. A positive curve that falls over
    more than two decades (a loss from 2.3 to 0.002) gets a log y axis, where
    the late, small improvements stay visible instead of hugging zero.

    Uses a bare ``Figure`` on the Agg canvas rather than pyplot, so the user's
    backend and pyplot's global figure list are left alone (and it is safe to
    call from the client's event thread).
    """
    if len(xs) < 2:   # one point is no curve; its value is in the metrics table
        return None
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    fig = Figure(figsize=size_in, dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(xs, ys, marker="." if len(xs) < 50 else None, linewidth=1.2, color="#1e88e5")
    if len(ys) > 1 and min(ys) > 0 and max(ys) / min(ys) > 100:
        ax.set_yscale("log")
    ax.set_xlabel("training_iteration")
    ax.set_ylabel(label)
    ax.set_title(f"{label} {fmt_value(ys[-1])}", fontsize="medium", loc="right")
    if all(isinstance(x, int) for x in xs):   # no 2.5th iteration
        ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


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

    Read by the views (all safe to read from another thread):
        run_name, world_size, total_epochs, state, message, error, error_text, elapsed_s,
        ranks, rank_progress, latest_metrics, history, worker_stats, notes,
        restarts, output_tail, loss_series(), summary_lines(), summary_html().
    """

    def __init__(self, run_name: str, world_size: int, total_epochs: int | None = None,
                 metric_keys: Iterable[str] = ("loss",),
                 clock: Callable[[], float] = time.time):
        self.run_name = str(run_name)
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
        self.started_at: float | None = None   # wall time of the first RUNNING
        self.ended_at: float | None = None     # wall time of the terminal state
        # rank -> (iteration, done, total, unit) of the newest report seen
        self._progress: dict[int, tuple[int, int, int | None, str]] = {}
        self._report_counts: dict[int, int] = {}
        self._latest: dict[str, Any] = {}
        self._latest_iter = -1
        self._history: list[tuple[float, dict]] = []
        self._stats: dict[int, dict] = {}
        self._stats_time: dict[int, float] = {}
        self.peak_rss: dict[int, int] = {}
        self._notes: list[str] = []
        self._output: dict[int, deque] = {}
        self.report_count = 0   # all ranks; views use it to see whether anything changed
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
        - ``output``: ``{"rank": int, "stream": str, "text": str}`` (a tail is kept)
        - ``note``: ``{"text": str}`` (e.g. a restart)
        - ``checkpoint``: ``{"name": "checkpoint_000004", ...}`` (one was committed)

        All may carry ``"time"`` (wall seconds, ``time.time()``).
        """
        if not isinstance(event, dict):
            return
        t = as_number(event.get("time"))
        t = float(t) if t is not None else self._clock()
        handler = {"state": self._on_state, "report": self._on_report,
                   "stats": self._on_stats, "output": self._on_output,
                   "note": self._on_note, "checkpoint": self._on_checkpoint}.get(event.get("kind"))
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
            self._stats[rank] = {"pid": int(pid) if pid is not None else None,
                                 "cpu_percent": float(cpu) if cpu is not None else None,
                                 "rss": int(rss) if rss is not None else None}
            self._stats_time[rank] = t
            if rss is not None:
                self.peak_rss[rank] = max(self.peak_rss.get(rank, 0), int(rss))

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
        that; frozen at the terminal state's time once the run ended."""
        with self._lock:
            if self.started_at is None:
                return 0.0
            end = self.ended_at if self.ended_at is not None else self._clock()
            return max(0.0, end - self.started_at)

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
            return {r: (p[1], p[2]) if (p := self._progress.get(r)) else (0, self.total_epochs)
                    for r in self.ranks}

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
        carried one (a bare 'failed' adds nothing to the state shown beside it)."""
        with self._lock:
            return self.error if self.error and self.message else None

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
        """E.g. 'epoch 3/10' or 'step 120' ('epoch 2-3/10' when ranks differ)."""
        prog = self.rank_progress
        if not prog:
            return ""
        dones = [d for d, _ in prog.values()]
        lo, hi = min(dones), max(dones)
        total = next((t for _, t in prog.values() if t), None)
        span = str(hi) if lo == hi else f"{lo}-{hi}"
        return f"{self.progress_unit} {span}" + (f"/{total}" if total else "")

    # ------------------------------------------------------------- summaries
    def summary_lines(self) -> list[str]:
        """A plain-text summary: header, progress, final metrics, workers, notes, error."""
        lines = [f"[{self.run_name}] {self.state} in {fmt_duration(self.elapsed_s)}"
                 + (f" | {self.progress_text()}" if self.report_count else "")]
        shown, bookkeeping = split_metrics(self.ordered_metrics())
        metrics = shown + bookkeeping
        if metrics:
            lines.append("  metrics: " + " ".join(f"{k}={fmt_value(v)}" for k, v in metrics))
        stats = self.worker_stats
        if 0 < len(stats) <= 2:
            lines.append("  workers: " + ", ".join(
                f"rank{r} pid {s['pid']} peak {fmt_bytes(self.peak_rss.get(r))}" for r, s in stats.items()))
        elif stats:   # one line however many ranks; the pids are in `raynb status` and the HTML summary
            peaks = {r: self.peak_rss[r] for r in stats if r in self.peak_rss}
            top = max(peaks, key=peaks.get) if peaks else None
            lines.append(f"  workers: {len(stats)} ranks, peak RSS {fmt_range(peaks.values(), fmt_bytes)}"
                         + (f" (highest rank{top})" if top is not None and len(set(peaks.values())) > 1 else ""))
        if self.latest_checkpoint:
            lines.append(f"  checkpoint: {self.latest_checkpoint} ({self.checkpoint_count} saved)")
        lines += [f"  note: {n}" for n in self.notes]
        if self.error_text:
            lines.append(f"  error: {self.error_text}")
        return lines

    def summary_html(self, plot: bool = True) -> str:
        """A self-contained HTML summary (no widgets, no scripts) that survives
        a reopened or exported notebook: state, elapsed, one bar per rank (with
        its pid and peak memory), the final metrics, notes, the error, and the
        loss curve as an inline base64 PNG when ``plot`` and matplotlib are
        available.

        Every element carries its own inline style, so the notebook front end's
        table styling (right-aligned, striped, padded rows in JupyterLab and
        nbconvert) does not spread it out; with styles stripped it degrades to
        plain tables."""
        e = html.escape
        colour = STATE_COLOURS.get(self.state, "#1565c0")
        head = (f'<div style="margin:0 0 4px 0"><b>{e(self.run_name)}</b> &mdash; '
                f'<span style="color:{colour};font-weight:bold">{e(self.state)}</span> '
                f'in {e(fmt_duration(self.elapsed_s))}'
                + (f' &middot; {e(self.latest_checkpoint)}' if self.latest_checkpoint else '')
                + (f' &middot; {self.restarts} restart(s)' if self.restarts else '') + '</div>')
        left = [progress_bars_html(self)]
        if self.latest_metrics:
            left.append('<div style="height:8px"></div>' + metrics_html(self.ordered_metrics()))
        body = [f'<div style="flex:0 1 auto">{"".join(left)}</div>']
        if plot:
            xs, ys = self.loss_series()
            key = self.loss_key() or "loss"
            png = render_curve_png(xs, ys, key)
            if png:
                body.append(f'<img alt="{e(key)} curve" width="{PLOT_WIDTH_PX}" '
                            f'style="max-width:100%;height:auto;margin:0" '
                            f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}"/>')
        parts = [f'<div class="raynb-summary" style="font-family:sans-serif;font-size:13px;line-height:1.4">',
                 head,
                 '<div style="display:flex;flex-wrap:wrap;gap:8px 28px;align-items:flex-start">',
                 *body, "</div>"]
        if self.notes:
            parts.append('<ul style="margin:6px 0;padding-left:20px;color:#ef6c00">'
                         + "".join(f"<li>{e(n)}</li>" for n in self.notes) + "</ul>")
        if self.error_text:
            parts.append(f'<pre style="color:#c62828;white-space:pre-wrap;margin:6px 0;font-family:monospace">{e(self.error_text)}</pre>')
        parts.append("</div>")
        return "\n".join(parts)


# ----------------------------------------------------------------- shared HTML pieces
# Inline styles that undo what Jupyter front ends do to tables in outputs
# (JupyterLab / nbconvert: right-aligned cells, 0.5em padding, striped rows,
# auto margins; ipywidgets' HTML: a 28px line height).
_TABLE_STYLE = ("border-collapse:collapse;border:none;margin:0;table-layout:auto;width:auto;"
                "font-size:inherit;color:inherit;line-height:1.4")
_ROW_STYLE = "background:none;border:none"


def _cell(content: str, right: bool = False, head: bool = False, muted: bool = False) -> str:
    tag = "th" if head else "td"
    style = (f"padding:1px 12px 1px 0;text-align:{'right' if right else 'left'};border:none;"
             "line-height:1.4;white-space:nowrap;vertical-align:middle;font-variant-numeric:tabular-nums")
    if head:
        style += ";font-weight:600"
    if muted:
        style += ";" + MUTED
    return f'<{tag} style="{style}">{content}</{tag}>'


def _table(rows: list[list[str]]) -> str:
    return (f'<table style="{_TABLE_STYLE}">'
            + "".join(f'<tr style="{_ROW_STYLE}">{"".join(r)}</tr>' for r in rows) + "</table>")


def split_metrics(pairs: list[tuple[str, Any]]) -> tuple[list, list]:
    """(the run's own metrics, bookkeeping ones such as epoch and time_total_s),
    each in the given order; `HIDDEN_KEYS` (the wall-clock timestamp) in neither."""
    shown = [(k, v) for k, v in pairs if k not in BOOKKEEPING_KEYS and k not in HIDDEN_KEYS]
    books = [(k, v) for k, v in pairs if k in BOOKKEEPING_KEYS and k not in HIDDEN_KEYS]
    return shown, books


def kv_table_html(pairs: list[tuple[str, Any]]) -> str:
    """A two-column metric/value HTML table: names left, values right."""
    rows = [[_cell("metric", head=True, muted=True), _cell("value", right=True, head=True, muted=True)]]
    rows += [[_cell(html.escape(str(k))), _cell(html.escape(fmt_value(v)), right=True)] for k, v in pairs]
    return _table(rows)


def metrics_html(pairs: list[tuple[str, Any]], limit: int | None = None) -> str:
    """The run's own metrics as a table, then the bookkeeping keys (epoch,
    training_iteration, time_total_s, ...) on one muted line; past ``limit``
    metrics, a '+N more' line."""
    shown, books = split_metrics(pairs)
    out = []
    if shown:
        more = len(shown) - limit if limit is not None and len(shown) > limit else 0
        out.append(kv_table_html(shown[:len(shown) - more]))
        if more:
            out.append(f'<div style="{MUTED}">+{more} more</div>')
    if books:
        # Wraps between pairs, never inside one, so it does not widen the column.
        out.append(f'<div style="{MUTED};white-space:normal;max-width:380px">'
                   + " &middot; ".join(f'<span style="white-space:nowrap">{html.escape(str(k))} '
                                       f'{html.escape(fmt_value(v))}</span>' for k, v in books)
                   + "</div>")
    return "".join(out)


def plural(unit: str, n: int | None) -> str:
    """'epochs' unless n == 1."""
    return unit if n == 1 else unit + "s"


def progress_label(done: int, total: int | None, unit: str) -> str:
    """'7/15 epochs', '1 epoch', '42 steps'."""
    return f"{done}/{total} {plural(unit, total)}" if total else f"{done} {plural(unit, done)}"


def progress_bars_html(p: RunProgress, stats: bool = True) -> str:
    """One static CSS bar per rank (for the summary; the live pane uses widgets),
    in a table whose rows also carry the rank's pid and peak memory when
    ``stats`` and samples arrived. Bars take the final state's colour."""
    prog = p.rank_progress
    scale = max([t or d for d, t in prog.values()] + [1])
    fill = BAR_COLOURS.get(p.state, "#42a5f5")
    worker_stats = p.worker_stats if stats else {}
    rows = []
    if worker_stats:
        rows.append([_cell("rank", head=True, muted=True), _cell("progress", head=True, muted=True), _cell(""),
                     _cell("pid", right=True, head=True, muted=True),
                     _cell("peak RSS", right=True, head=True, muted=True)])
    unit = p.progress_unit
    for r, (done, total) in prog.items():
        pct = 100.0 * min(done, total or scale) / (total or scale)
        bar = (f'<span style="display:inline-block;width:160px;height:10px;background:#e0e0e0;'
               f'border-radius:2px;overflow:hidden;vertical-align:middle">'
               f'<span style="display:block;height:100%;width:{pct:.0f}%;background:{fill}"></span></span>')
        row = [_cell(f"rank {r}"), _cell(bar), _cell(html.escape(progress_label(done, total, unit)))]
        if worker_stats:
            s = worker_stats.get(r)
            row += [_cell(html.escape(str(s["pid"])) if s else "", right=True, muted=True),
                    _cell(html.escape(fmt_bytes(p.peak_rss.get(r))) if s else "", right=True)]
        rows.append(row)
    return _table(rows)


def _as_rank(value: Any) -> int | None:
    """A rank from an int or a numeric string (JSON turns dict keys into strings)."""
    if isinstance(value, bool):
        return None
    try:
        r = int(value)
    except (TypeError, ValueError):
        return None
    return r if r >= 0 else None
