"""Tune's live trial table in Jupyter: an ipywidgets pane over a `TuneProgress`.

The table (HTML widget) is rewritten at most every ``min_interval_s``, the
metric plot (PNG bytes from matplotlib's Agg canvas in an ``Image`` widget) at
most every ``plot_interval_s``, and only when the model changed; new results
wait for the plot, so the table and the curves of one frame come from one
`TuneProgress.frame` and agree (the ★ row is the legend's best); a throttled
change is drawn by a trailing timer so the last one is never lost. When tuning
ends, `finish` replaces the pane with static HTML (every trial's row and the
final plot inline), which a saved notebook shows without a kernel.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import ipywidgets as widgets
from IPython.display import display as ipy_display

from ..run_pane.widget import TextHTML, TextVBox, close_tree
from .model import TuneProgress
from .render import PLOT_WIDTH_PX

HEADER_TICK_S = 1.0  # the elapsed time in the header advances this often without events


class TuneTablePane:
    """The live trial table: header, table and plot side by side, notes below.

    Args:
        progress: the model the driver feeds.
        min_interval_s: least seconds between two table redraws (0.25: 4/s).
        plot_interval_s: least seconds between two plot renders (tens to
            hundreds of ms each with many trials).
        max_rows: rows of the live table and of the static summary left by
            `finish` (best and RUNNING trials first; the rest counted by status).
        trailing: draw a throttled change later from a timer thread.
        clock: monotonic seconds, injectable for tests.

    Attributes for callers and tests: ``widget`` (root ``VBox``), ``header``,
    ``table`` (``HTML``), ``plot`` (``Image``), ``notes`` (``HTML``),
    ``redraws`` and ``plot_renders`` (counters; a header-only tick of the
    elapsed time is not a redraw), ``summary`` (the HTML left by
    `finish`).
    """

    def __init__(
        self,
        progress: TuneProgress,
        min_interval_s: float = 0.25,
        plot_interval_s: float = 1.0,
        max_rows: int = 30,
        trailing: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.progress = progress
        self.min_interval_s = float(min_interval_s)
        self.plot_interval_s = float(plot_interval_s)
        self.max_rows = max_rows
        self.trailing = trailing
        self._clock = clock
        self._lock = threading.RLock()  # update() and the trailing timer may race
        self._timer: threading.Timer | None = None
        self._last_redraw = -float("inf")
        self._last_plot = -float("inf")
        self._last_tick = -float("inf")
        self._drawn_version = -1
        self._plotted_version = -1
        self._frame: TuneProgress | None = None  # the frozen copy the pane shows
        self._handle = None
        self.finished = False
        self.redraws = 0
        self.plot_renders = 0
        self.summary: str | None = None

        self.header = widgets.HTML()
        self.table = widgets.HTML(
            layout=widgets.Layout(max_height="420px", overflow="auto", flex="0 1 auto", margin="0 16px 0 0")
        )
        self.plot = widgets.Image(
            format="png",
            layout=widgets.Layout(
                display="none", width=f"{PLOT_WIDTH_PX}px", height="auto", max_width="100%"
            ),
        )
        self.notes = widgets.HTML()
        body = widgets.HBox(
            [self.table, self.plot], layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start")
        )
        # Without widgets (jupyter console), the pane reads as the text view's table.
        self.widget = TextVBox([self.header, body, self.notes], text=self._text)
        self._redraw(self._clock())

    # ------------------------------------------------------------- public
    def display(self) -> None:
        """Show the pane in the current cell's output."""
        self._handle = ipy_display(self.widget, display_id=True)

    def update(self) -> None:
        """Redraw if the model changed and ``min_interval_s`` passed; else
        return at once (a throttled change is drawn by the trailing timer)."""
        if self.progress.version == self._drawn_version:
            # Nothing new (a plot still due is the trailing timer's); but the elapsed
            # time in the header still ticks, once a second, while trials run quietly.
            now = self._clock()
            if now - self._last_tick >= HEADER_TICK_S and not self.finished:
                self._last_tick = now
                with self._lock:
                    if not self.finished:
                        self.header.value = self._header()
            return
        now = self._clock()
        wait = self._last_redraw + self.min_interval_s - now
        if wait > 0:
            self._schedule(wait)
            return
        with self._lock:
            if not self.finished:
                self._redraw(now)

    def finish(self) -> None:
        """Close the widgets and leave the static HTML summary in their place
        (or below, when the pane was never displayed). Safe to call twice."""
        with self._lock:
            if self.finished:
                return
            self.finished = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self.progress.end()
            final = self.progress.frame()  # the summary's table and plot from one read
            # Only what the live table showed: a 10,000-row table made the saved output
            # megabytes of HTML and took the end of the sweep half a second to render.
            self.summary = final.summary_html(plot=True, max_rows=self.max_rows)
            summary = TextHTML(self.summary, final.summary_text(self.max_rows))
            if self._handle is not None:
                self._handle.update(summary)  # by display_id: in place, from any thread
            else:
                ipy_display(summary)
            close_tree(self.widget)

    # ------------------------------------------------------------- parts
    def _redraw(self, now: float) -> None:
        """One frame: header, table, plot and notes from one `TuneProgress.frame`. New
        results wait until the plot may be drawn too (``plot_interval_s``): a table ahead
        of its curve showed another best trial than the legend's, and an older iter."""
        p = self.progress
        if p.results_version != self._plotted_version and now - self._last_plot < self.plot_interval_s:
            self._schedule(self._last_plot + self.plot_interval_s - now)
            return
        frame = p.frame()
        png = None
        if frame.results_version != self._plotted_version:
            # Rendered before any widget changes, so new numbers never sit beside an old curve.
            png = frame.plot_png()
            self._last_plot = now
            self._plotted_version = frame.results_version
            self.plot_renders += 1
        self._frame = frame
        self._last_redraw = now
        self.redraws += 1
        self._drawn_version = frame.version
        self._last_tick = now
        self.header.value = self._header()
        self.table.value = frame.html_table(self.max_rows)
        if png:
            self.plot.value = png
            self.plot.layout.display = None
        self.notes.value = frame.errors_html() + frame.notes_html(last=5)

    def _text(self) -> str:
        p = self._frame or self.progress.frame()
        return f"== Tune running: {p.status_line()} ==\n{p.text_table(self.max_rows)}"

    def _header(self) -> str:
        """The header of the frame drawn last (its trials; the elapsed time runs on)."""
        return f"<div style='line-height:1.4'>{(self._frame or self.progress).header_html()}</div>"

    def _schedule(self, delay: float) -> None:
        if not self.trailing or self._timer is not None or self.finished:
            return
        with self._lock:
            if self._timer is not None:
                return
            self._timer = threading.Timer(max(0.0, delay), self._trailing)
            self._timer.daemon = True
            self._timer.start()

    def _trailing(self) -> None:
        with self._lock:
            self._timer = None
            if self.finished:
                return
            if (
                self.progress.version != self._drawn_version
                or self.progress.results_version != self._plotted_version
            ):
                self._redraw(self._clock())


__all__ = ["TuneTablePane"]
