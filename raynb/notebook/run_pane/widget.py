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

import ipywidgets as widgets
from IPython.display import HTML
from IPython.display import display as ipy_display

from ..formatting import (
    MUTED,
    PLOT_HEIGHT_PX,
    PLOT_WIDTH_PX,
    STATE_COLOURS,
    fmt_bytes,
    fmt_duration,
    metrics_html,
    progress_label,
    render_curve_png,
    wants_log_y,
)
from .log_view import LogView
from .model import RunProgress

_BAR_STYLE = {"FINISHED": "success", "FAILED": "danger", "CANCELLED": "warning", "STOPPED": "warning"}
MAX_METRICS = 12  # rows in the live metrics table; the rest is counted
SCROLL_RANKS = 8  # more ranks than this: the bars scroll in a box of this many rows
_ROW_PX = 32  # an IntProgress row: 28px high plus its margins


class TextVBox(widgets.VBox):
    """A ``VBox`` whose ``text/plain`` form is ``text()``, not ``VBox(children=(HTML(...``:
    what a front-end that renders no widgets (jupyter console, nbconvert to text, a
    plain-text log of the kernel's outputs) shows in the widget's place."""

    def __init__(self, children, text: Callable[[], str], **kwargs):
        super().__init__(children, **kwargs)
        self._text = text

    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs)
        data["text/plain"] = self._text()
        return data


class TextHTML(HTML):
    """Static HTML with a ``text/plain`` form of its own (not ``<IPython.core.display.HTML
    object>``): the summary a front-end without HTML shows."""

    def __init__(self, data: str, text: str):
        super().__init__(data)
        self.text = text

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(self.text)

    def __repr__(self) -> str:
        return self.text


def _text_view(progress: RunProgress):
    from .text import TextProgress

    return TextProgress(progress)


class ProgressPane:
    """An ipywidgets pane over a `RunProgress`.

    Args:
        progress: the model the pane shows; `handle` feeds it.
        min_interval_s: least seconds between two refreshes (and two plot
            renders) driven by events; 0.25 means at most 4 redraws a second.
        trailing: when an event is throttled, refresh once more after the
            interval from a timer thread, so the last update is never lost.
        clock: monotonic seconds, injectable for tests.

    Layout: the header line (name, state, elapsed, progress); then, side by
    side (wrapping under each other in a narrow output), a column with one
    bar per rank (labelled with its progress and the worker's CPU and RSS),
    the latest metrics and the workers' totals, and the loss plot.

    Attributes for callers and tests: ``widget`` (the root ``VBox``),
    ``header``, ``bars`` (rank -> ``IntProgress``), ``metrics_html``,
    ``plot`` (``Image``), ``stats_html`` (all workers' CPU and RSS),
    ``notes_html``, ``log_view`` (each rank's recent output, `LogView`),
    ``refreshes`` and ``plot_renders`` (counters),
    ``summary`` (the HTML left by `finish`).
    """

    def __init__(
        self,
        progress: RunProgress,
        min_interval_s: float = 0.25,
        trailing: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.progress = progress
        self.min_interval_s = float(min_interval_s)
        self.trailing = trailing
        self._clock = clock
        self._lock = threading.RLock()  # handle() and the trailing timer may race
        self._timer: threading.Timer | None = None
        self._last_refresh = -float("inf")
        self._plotted_reports = -1  # report_count when the plot was last drawn
        self.log_y: bool | None = None  # the curve's scale, decided at its first draw
        self._handle = None  # IPython DisplayHandle, once displayed
        self.finished = False
        self._closing = False
        self.refreshes = 0
        self.plot_renders = 0
        self.summary: str | None = None

        self.header = widgets.HTML()
        self.bars: dict[int, widgets.IntProgress] = {}
        self._bar_labels: dict[int, widgets.HTML] = {}
        self.bars_box = widgets.VBox()
        self.metrics_html = widgets.HTML()
        self.stats_html = widgets.HTML()
        self.plot = widgets.Image(
            format="png",
            layout=widgets.Layout(
                display="none", width=f"{PLOT_WIDTH_PX}px", height="auto", max_width="100%"
            ),
        )
        self.notes_html = widgets.HTML()
        left = widgets.VBox(
            [self.bars_box, self.metrics_html, self.stats_html],
            layout=widgets.Layout(margin="0 16px 0 0", flex="0 1 auto"),
        )
        # The curve's place is kept from the start: the pane does not grow when it appears.
        self.plot_box = widgets.Box([self.plot], layout=widgets.Layout(min_height=f"{PLOT_HEIGHT_PX}px"))
        body = widgets.HBox(
            [left, self.plot_box], layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start")
        )
        # Without widgets (jupyter console), the pane reads as the text view's status line.
        self.widget = TextVBox([self.header, body, self.notes_html], text=_text_view(progress).status_line)
        self.log_view = LogView(progress.world_size)  # each rank's recent output (log_view.py)
        self.widget.children += (self.log_view.widget,)
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
            self.log_view.handle(event)  # redraws only the log view, throttled by itself
            return
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
            # One read of the model feeds the curve and the table (the title's loss is
            # the table's); the plot is rendered (tens of ms) before any widget changes,
            # so the browser does not show new numbers next to an old curve meanwhile.
            xs, ys, key, metrics, count = p.plot_frame()
            png = self._render_plot(xs, ys, key, count)
            self._update_header(p)
            self._update_bars(p)
            self.metrics_html.value = (
                f"<div style='line-height:1.4;margin:6px 0 2px 0'>"
                f"{metrics_html(metrics, limit=MAX_METRICS)}</div>"
                if metrics
                else ""
            )
            self._update_stats(p)
            if png:
                self.plot.value = png
                self.plot.layout.display = None
            notes = p.notes[-5:]
            self.notes_html.value = "".join(
                f"<div style='color:#ef6c00'>{html.escape(n)}</div>" for n in notes
            )
            if p.error_text:
                self.notes_html.value += (
                    f"<pre style='color:#c62828;white-space:pre-wrap;font-family:monospace;line-height:1.3'>"
                    f"{html.escape(p.error_text)}</pre>"
                )
            return True

    def finish(self) -> None:
        """Final refresh, close the widgets, and leave the static HTML summary
        in their place (or below, when the pane was never displayed). Safe to
        call more than once."""
        with self._lock:
            if self.finished:
                return
            # The last frame has every report: the final curve is drawn once, shown in the
            # pane's last refresh and reused by the summary that replaces it.
            xs, ys = self.progress.loss_series()
            final_png = render_curve_png(xs, ys, self.progress.loss_key() or "loss", log_y=self._scale(ys))
            self._closing = True  # the final refresh draws no curve of its own
            self.refresh(force=True)
            if final_png:
                self.plot.value = final_png
                self.plot.layout.display = None
                self.plot_renders += 1
            self.finished = True
            if self._timer is not None:  # after the refresh, which may have set one
                self._timer.cancel()
                self._timer = None
            self.summary = self.progress.summary_html(png=final_png)
            summary = TextHTML(self.summary, "\n".join(self.progress.summary_lines()))
            if self._handle is not None:
                # Replacing the pane's output by display_id works from any thread
                # and keeps the summary where the pane was.
                self._handle.update(summary)
            else:
                ipy_display(summary)
            self.log_view.close()
            close_tree(self.widget)  # frees every child's comm, not just the root's

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
        colour = STATE_COLOURS.get(p.state, "#000")
        extra = f" &middot; {html.escape(p.progress_text())}" if p.report_count else ""
        restarts = f" &middot; {p.restarts} restart(s)" if p.restarts else ""
        if p.latest_checkpoint:
            restarts += f" &middot; {html.escape(p.latest_checkpoint)}"
        self.header.value = (
            f"<b>{html.escape(p.run_name)}</b> &middot; "
            f"<span style='color:{colour};font-weight:bold'>{html.escape(p.state)}</span>"
            f" &middot; {fmt_duration(p.elapsed_s)}{extra}{restarts}"
        )

    def _update_bars(self, p: RunProgress) -> None:
        prog = p.rank_progress
        if set(prog) != set(self.bars):  # a rank beyond world_size showed up
            for r in prog:
                if r not in self.bars:
                    self.bars[r] = widgets.IntProgress(
                        min=0,
                        max=1,
                        value=0,
                        description=f"rank {r}",
                        style={"description_width": "56px"},
                        layout=widgets.Layout(width="210px"),
                    )
                    # width auto: as wide as the text, not ipywidgets' 300px default
                    self._bar_labels[r] = widgets.HTML(
                        layout=widgets.Layout(margin="0 0 0 6px", width="auto")
                    )
            # flex 0 0 auto: past SCROLL_RANKS the box scrolls; rows must not shrink instead
            self.bars_box.children = [
                widgets.HBox([self.bars[r], self._bar_labels[r]], layout=widgets.Layout(flex="0 0 auto"))
                for r in sorted(prog)
            ]
            if len(prog) > SCROLL_RANKS:  # 64 ranks must not push the metrics off the screen
                self.bars_box.layout.max_height = f"{SCROLL_RANKS * _ROW_PX}px"
                self.bars_box.layout.overflow = "auto"
        style = _BAR_STYLE.get(p.state, "")
        stats = p.worker_stats
        unit = p.progress_unit
        for r, (done, total) in prog.items():
            bar = self.bars[r]
            # Without a known total a bar cannot say how far a rank is: it stays empty
            # (scaled to the furthest rank, step 10 of 240 looked complete) and the
            # label counts; a run that FINISHED is full.
            bar.max = max(total or 1, 1)
            bar.value = min(done, bar.max) if total else int(p.state == "FINISHED")
            bar.bar_style = style
            label = html.escape(progress_label(done, total, unit, p.finished))
            s = stats.get(r)
            if s is not None and not p.finished:
                label += (
                    f" <span style='{MUTED}'>&middot; {_cpu(s)} CPU &middot; {fmt_bytes(s['rss'])}</span>"
                )
            self._bar_labels[r].value = label

    def _render_plot(self, xs: list, ys: list, key: str, count: int) -> bytes | None:
        """The new loss-curve PNG, or None when there is nothing new to draw.

        Every refresh that shows new reports draws them, forced ones too: a state
        change right after a render once left the last live frame's curve behind the
        table beside it. Refreshes driven by reports are spaced by ``min_interval_s``."""
        if count == self._plotted_reports or self._closing:
            return None  # nothing new to draw, or about to be replaced by the summary
        self._plotted_reports = count
        png = render_curve_png(xs, ys, key, log_y=self._scale(ys))
        if png:
            self.plot_renders += 1
        return png

    def _scale(self, ys: list) -> bool | None:
        """The y scale (log or not), decided from the first curve drawn and kept: an
        axis that switched from linear to log in the middle of a run read as a jump."""
        if self.log_y is None and len(ys) > 1:
            self.log_y = wants_log_y(ys)
        return self.log_y

    def _update_stats(self, p: RunProgress) -> None:
        """One muted line with all workers together (each rank's own numbers are
        on its bar): '4 workers · CPU 380% · RSS 1.1 GiB'."""
        stats = p.worker_stats
        if not stats:
            self.stats_html.value = ""
            return
        cpus = [s["cpu_percent"] for s in stats.values() if s["cpu_percent"] is not None]
        rss = [s["rss"] for s in stats.values() if s["rss"] is not None]
        n = len(stats)
        on_gpu = [s for s in stats.values() if s.get("gpu") is not None]
        gpu = ""
        if on_gpu:  # where NVML sees GPUs: the ranks' mean utilization and their memory
            util = [s["gpu_util"] for s in on_gpu if s.get("gpu_util") is not None]
            mem = [s["gpu_mem_used"] for s in on_gpu if s.get("gpu_mem_used") is not None]
            gpu = (
                f" &middot; GPU {f'{sum(util) / len(util):.0f}%' if util else '?'}"
                f" {fmt_bytes(sum(mem)) if mem else '?'}"
            )
        self.stats_html.value = (
            f"<div style='{MUTED}'>{n} worker{'s' if n != 1 else ''} &middot; "
            f"CPU {f'{sum(cpus):.0f}%' if cpus else '?'} &middot; "
            f"RSS {fmt_bytes(sum(rss)) if rss else '?'}{gpu}</div>"
        )


def _cpu(s: dict) -> str:
    return "?" if s["cpu_percent"] is None else f"{s['cpu_percent']:.0f}%"


def close_tree(w: widgets.Widget) -> None:
    """Close a widget and all its children (each holds a comm of its own)."""
    for child in getattr(w, "children", ()):
        close_tree(child)
    w.close()


__all__ = ["ProgressPane"]
