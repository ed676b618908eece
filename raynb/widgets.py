"""The live progress pane shown in Jupyter while a run is going.

A `ProgressPane` is a view over a `RunProgress`: events go into the model,
and the widgets are rewritten from the model at most every ``min_interval_s``
(a state change or a note refreshes at once). The loss plot is rendered by
matplotlib's Agg canvas to PNG bytes in an ``ipywidgets.Image``: no interactive
backend, no pyplot state, and the bytes can be checked in tests.

When the run ends, `finish` swaps the pane for a static HTML summary, so a
reopened or exported notebook still shows the result (widget state is usually
not saved with a notebook).
"""
from __future__ import annotations

import html
import threading
import time
from typing import Callable

import ipywidgets as W
from IPython.display import HTML
from IPython.display import display as ipy_display

from .progress import RunProgress, fmt_bytes, fmt_duration, kv_table_html, render_curve_png

_BAR_STYLE = {"FINISHED": "success", "FAILED": "danger", "CANCELLED": "warning"}
_STATE_COLOUR = {"FINISHED": "#2e7d32", "FAILED": "#c62828", "CANCELLED": "#ef6c00",
                 "RUNNING": "#1565c0", "PENDING": "#757575"}


class ProgressPane:
    """An ipywidgets pane over a `RunProgress`.

    Args:
        progress: the model the pane shows; `handle` feeds it.
        min_interval_s: least seconds between two refreshes (and two plot
            renders) driven by events; 0.25 means at most 4 redraws a second.
        trailing: when an event is throttled, refresh once more after the
            interval from a timer thread, so the last update is never lost.
        clock: monotonic seconds, injectable for tests.

    Attributes for callers and tests: ``widget`` (the root ``VBox``),
    ``header``, ``bars`` (rank -> ``IntProgress``), ``metrics_html``,
    ``plot`` (``Image``), ``stats_html``, ``notes_html``, ``refreshes`` and
    ``plot_renders`` (counters), ``summary`` (the HTML left by `finish`).
    """

    def __init__(self, progress: RunProgress, min_interval_s: float = 0.25,
                 trailing: bool = True, clock: Callable[[], float] = time.monotonic):
        self.progress = progress
        self.min_interval_s = float(min_interval_s)
        self.trailing = trailing
        self._clock = clock
        self._lock = threading.RLock()   # handle() and the trailing timer may race
        self._timer: threading.Timer | None = None
        self._last_refresh = -float("inf")
        self._last_render = -float("inf")
        self._plotted_reports = -1       # report_count when the plot was last drawn
        self._handle = None              # IPython DisplayHandle, once displayed
        self.finished = False
        self.refreshes = 0
        self.plot_renders = 0
        self.summary: str | None = None

        self.header = W.HTML()
        self.bars: dict[int, W.IntProgress] = {}
        self._bar_labels: dict[int, W.HTML] = {}
        self.bars_box = W.VBox()
        self.metrics_html = W.HTML(layout=W.Layout(min_width="220px", margin="0 16px 0 0"))
        self.plot = W.Image(format="png", layout=W.Layout(display="none"))
        self.stats_html = W.HTML()
        self.notes_html = W.HTML()
        self.widget = W.VBox([self.header, self.bars_box,
                              W.HBox([self.metrics_html, self.plot]),
                              self.stats_html, self.notes_html])
        self.refresh(force=True)

    # ------------------------------------------------------------- public
    def display(self) -> None:
        """Show the pane in the current cell's output."""
        self._handle = ipy_display(self.widget, display_id=True)

    def handle(self, event: dict) -> None:
        """Feed one run event (see `RunProgress.on_event`) to the model and
        refresh: at once for a state change or a note, else throttled."""
        self.progress.on_event(event)
        kind = event.get("kind") if isinstance(event, dict) else None
        if kind == "output":
            return  # the pane shows no logs; don't spend a redraw on them
        self.refresh(force=kind in ("state", "note"))

    def refresh(self, force: bool = False) -> bool:
        """Rewrite the widgets from the model. Unless ``force``, does nothing
        (and schedules a trailing refresh) when the last one was under
        ``min_interval_s`` ago. Returns whether it refreshed."""
        with self._lock:
            if self.finished:
                return False
            now = self._clock()
            wait = self._last_refresh + self.min_interval_s - now
            if not force and wait > 0:
                self._schedule(wait)
                return False
            self._last_refresh = now
            self.refreshes += 1
            p = self.progress
            self._update_header(p)
            self._update_bars(p)
            self.metrics_html.value = kv_table_html(p.ordered_metrics()) if p.latest_metrics else ""
            self._update_plot(p, now, force)
            self._update_stats(p)
            notes = p.notes[-5:]
            self.notes_html.value = "".join(
                f"<div style='color:#ef6c00'>{html.escape(n)}</div>" for n in notes)
            if p.error:
                self.notes_html.value += (f"<pre style='color:#c62828;white-space:pre-wrap'>"
                                          f"{html.escape(p.error)}</pre>")
            return True

    def finish(self) -> None:
        """Final refresh, close the widgets, and leave the static HTML summary
        in their place (or below, when the pane was never displayed). Safe to
        call more than once."""
        with self._lock:
            if self.finished:
                return
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self.refresh(force=True)
            self.finished = True
            self.summary = self.progress.summary_html()
            summary = HTML(self.summary)
            if self._handle is not None:
                # Replacing the pane's output by display_id works from any thread
                # and keeps the summary where the pane was.
                self._handle.update(summary)
            else:
                ipy_display(summary)
            _close_tree(self.widget)   # frees every child's comm, not just the root's

    # ------------------------------------------------------------- parts
    def _schedule(self, delay: float) -> None:
        if not self.trailing or self._timer is not None:
            return
        self._timer = threading.Timer(delay, self._trailing_refresh)
        self._timer.daemon = True
        self._timer.start()

    def _trailing_refresh(self) -> None:
        with self._lock:
            self._timer = None
        self.refresh()

    def _update_header(self, p: RunProgress) -> None:
        colour = _STATE_COLOUR.get(p.state, "#000")
        extra = f" &middot; {html.escape(p.progress_text())}" if p.report_count else ""
        restarts = f" &middot; {p.restarts} restart(s)" if p.restarts else ""
        self.header.value = (f"<b>{html.escape(p.run_name)}</b> &middot; "
                             f"<span style='color:{colour};font-weight:bold'>{html.escape(p.state)}</span>"
                             f" &middot; {fmt_duration(p.elapsed_s)}{extra}{restarts}")

    def _update_bars(self, p: RunProgress) -> None:
        prog = p.rank_progress
        if set(prog) != set(self.bars):   # a rank beyond world_size showed up
            for r in prog:
                if r not in self.bars:
                    self.bars[r] = W.IntProgress(min=0, max=1, value=0, description=f"rank {r}")
                    self._bar_labels[r] = W.HTML()
            self.bars_box.children = [W.HBox([self.bars[r], self._bar_labels[r]]) for r in sorted(prog)]
        # Without a known total, bars are scaled to the furthest rank.
        scale = max([d for d, _ in prog.values()] + [1])
        style = _BAR_STYLE.get(p.state, "")
        for r, (done, total) in prog.items():
            bar = self.bars[r]
            bar.max = max(total or scale, 1)
            bar.value = min(done, bar.max)
            bar.bar_style = style
            self._bar_labels[r].value = (f"{done}/{total} {p.progress_unit}" if total
                                         else f"{done} {p.progress_unit}")

    def _update_plot(self, p: RunProgress, now: float, force: bool) -> None:
        if p.report_count == self._plotted_reports:
            return  # nothing new to draw
        if not force and now - self._last_render < self.min_interval_s:
            return
        xs, ys = p.loss_series()
        self._plotted_reports = p.report_count
        if not xs:
            return
        png = render_curve_png(xs, ys, p.loss_key() or "loss")
        if png:
            self._last_render = now
            self.plot_renders += 1
            self.plot.value = png
            self.plot.layout.display = None

    def _update_stats(self, p: RunProgress) -> None:
        stats = p.worker_stats
        if not stats:
            self.stats_html.value = ""
            return
        def cpu(s):
            return "?" if s["cpu_percent"] is None else f"{s['cpu_percent']:.0f}%"
        rows = "".join(f"<tr><td>rank {r}</td><td>{s['pid']}</td><td style='text-align:right'>{cpu(s)}</td>"
                       f"<td style='text-align:right'>{fmt_bytes(s['rss'])}</td></tr>"
                       for r, s in stats.items())
        self.stats_html.value = ("<table><tr><th>worker</th><th>pid</th><th>CPU</th><th>RSS</th></tr>"
                                 f"{rows}</table>")


def _close_tree(w: W.Widget) -> None:
    for child in getattr(w, "children", ()):
        _close_tree(child)
    w.close()


__all__ = ["ProgressPane"]
