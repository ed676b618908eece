"""The progress pane's log view: any rank's recent output, or all ranks', stderr marked.

`LogTail` is the model: a bounded tail of each rank's lines (and one of all ranks
together, in arrival order), each line with its stream, fed by the run's ``output``
events; it imports no display. `LogView` is the widget: a Dropdown ``rank 0 / rank 1 /
... / all ranks`` (rank 0 first) over an HTML area, hidden until the first line, redrawn
at most every ``min_interval_s``. The tail is what the pane can show without growing;
every line of every rank stays in the run directory (``Result.logs(rank=N)``).
"""

from __future__ import annotations

import html
import threading
import time
from collections import deque
from typing import Callable

import ipywidgets as widgets

ALL = "all"
TAIL_LINES = 200  # kept per rank, and for all ranks together
MAX_LINE_CHARS = 2000  # a line never ended (progress dots) stops growing here
_STDERR = "color:#c62828"
LOG_HEIGHT_EM = 12  # fixed, not a max-height: the pane keeps its height as lines arrive


class LogTail:
    """Each rank's recent output lines, with their stream.

    Args:
        world_size: ranks offered before any of them printed.
        lines: lines kept per rank and for all ranks together.

    A text without a final newline (``print(".", end="", flush=True)``) is continued
    by the same rank's next text on that stream, as a terminal would show it.
    Malformed events (no int rank, no str text) are ignored.
    """

    def __init__(self, world_size: int, lines: int = TAIL_LINES):
        self.world_size = max(0, int(world_size))
        self._lock = threading.Lock()
        self._ranks: dict[int, deque] = {}
        self._all: deque = deque(maxlen=lines)
        self._lines = lines
        self._open: dict[tuple[int, str], list] = {}  # (rank, stream) -> its unfinished line
        self.version = 0  # grows with every line added or continued

    def on_event(self, event: dict) -> bool:
        """Fold an ``output`` event (``{"rank", "stream", "text"}``) in; True if it added text."""
        if not isinstance(event, dict) or event.get("kind", "output") != "output":
            return False
        rank, text = event.get("rank"), event.get("text")
        if (
            not isinstance(rank, int)
            or isinstance(rank, bool)
            or rank < 0
            or not isinstance(text, str)
            or not text
        ):
            return False
        stream = "stderr" if event.get("stream") == "stderr" else "stdout"
        with self._lock:
            tail = self._ranks.setdefault(rank, deque(maxlen=self._lines))
            pieces = text.split("\n")
            ended = pieces[-1] == ""
            if ended:
                pieces.pop()
            entry = self._open.pop((rank, stream), None)
            if entry is not None and pieces:
                entry[2] = (entry[2] + pieces.pop(0))[:MAX_LINE_CHARS]
            for piece in pieces:
                entry = [rank, stream, piece[:MAX_LINE_CHARS]]  # shared by both tails
                tail.append(entry)
                self._all.append(entry)
            if not ended and entry is not None:
                self._open[(rank, stream)] = entry
            self.version += 1
        return True

    @property
    def ranks(self) -> list[int]:
        """The ranks to offer: 0..world_size-1 and any other that printed."""
        with self._lock:
            return sorted(set(range(self.world_size)) | set(self._ranks))

    def lines(self, which=0) -> list[tuple[int, str, str]]:
        """(rank, stream, text) of rank ``which``'s tail, or of all ranks' for ``"all"``."""
        with self._lock:
            src = self._all if which == ALL else self._ranks.get(which, ())
            return [tuple(e) for e in src]


def render_lines(entries, with_rank: bool) -> str:
    """The lines as escaped HTML, one per line (``(rank N)`` first when ``with_rank``);
    stderr in red, marked ``[stderr]``."""
    out = []
    for rank, stream, text in entries:
        tag = f"(rank {rank}) " if with_rank else ""
        if stream == "stderr":
            out.append(
                f"<span style='{_STDERR}' title='stderr'>{html.escape(f'{tag}[stderr] {text}')}</span>"
            )
        else:
            out.append(html.escape(tag + text))
    return "\n".join(out)


class LogView:
    """The log view: a rank selector over the selected rank's recent lines.

    Args:
        world_size: ranks in the selector before any printed.
        min_interval_s: least seconds between two redraws driven by events; a
            skipped one is made up by a timer after the interval (``trailing``).
        clock: monotonic seconds, injectable for tests.

    Attributes: ``model`` (`LogTail`), ``selector`` (Dropdown; values are ranks and
    ``"all"``), ``text`` (HTML), ``widget`` (the VBox the pane shows), ``redraws``.
    """

    def __init__(
        self,
        world_size: int,
        min_interval_s: float = 0.5,
        trailing: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.model = LogTail(world_size)
        self.min_interval_s = float(min_interval_s)
        self.trailing = trailing
        self._clock = clock
        self._lock = threading.RLock()
        self._timer: threading.Timer | None = None
        self._last = -float("inf")
        self._drawn = (None, -1)  # (selection, model version) last drawn
        self._setting_options = False
        self.redraws = 0
        self.closed = False
        self.selector = widgets.Dropdown(
            options=self._options(),
            value=0,
            description="logs",
            style={"description_width": "36px"},
            layout=widgets.Layout(width="170px"),
        )
        self.text = widgets.HTML()
        self.widget = widgets.VBox(
            [self.selector, self.text], layout=widgets.Layout(display="none", margin="6px 0 0 0")
        )
        self.selector.observe(lambda change: self.refresh(force=True), "value")

    def _options(self) -> list[tuple[str, object]]:
        return [(f"rank {r}", r) for r in self.model.ranks] + [("all ranks", ALL)]

    def handle(self, event: dict) -> None:
        """Feed an ``output`` event; redraws (throttled) when it added text."""
        if self.model.on_event(event):
            self.refresh()

    def refresh(self, force: bool = False) -> bool:
        """Redraw from the model; unless ``force``, at most every ``min_interval_s``."""
        with self._lock:
            if self.closed or self._setting_options:
                return False
            now = self._clock()
            wait = self._last + self.min_interval_s - now
            if not force and wait > 0:
                if self.trailing and self._timer is None:
                    self._timer = threading.Timer(wait, self._trailing_refresh)
                    self._timer.daemon = True
                    self._timer.start()
                return False
            self._last = now
            options = self._options()
            if options != list(self.selector.options):  # a rank beyond world_size printed
                selected = self.selector.value
                self._setting_options = True
                try:
                    self.selector.options = options
                    self.selector.value = selected  # new options reset the choice
                finally:
                    self._setting_options = False
            which = self.selector.value
            if self._drawn == (which, self.model.version):
                return False
            self._drawn = (which, self.model.version)
            self.redraws += 1
            self.text.value = self._body_html(which)
            if self.model.version:
                self.widget.layout.display = None
            return True

    def _body_html(self, which) -> str:
        """The selected tail as HTML in a box of fixed height (the pane must not grow
        with each line). A rank that printed nothing while others did shows all ranks'
        lines under a note: 'no output yet' above the cell's printed output misled."""
        entries = self.model.lines(which)
        note = ""
        if not entries and which != ALL and self.model.lines(ALL):
            entries, note = self.model.lines(ALL), f"<i>rank {which} printed nothing yet; all ranks:</i>\n"
        body = render_lines(entries, with_rank=which == ALL or bool(note)) if entries else ""
        # column-reverse keeps the scroll at the newest line, as a terminal does
        return (
            f"<div style='display:flex;flex-direction:column-reverse;height:{LOG_HEIGHT_EM}em;"
            "overflow:auto;border:1px solid #ddd;padding:2px 6px'>"
            "<pre style='margin:0;font-size:12px;line-height:1.35;white-space:pre-wrap'>"
            f"{note}{body if entries else '<i>no output yet</i>'}</pre></div>"
        )

    def _trailing_refresh(self) -> None:
        with self._lock:
            self._timer = None
        self.refresh()

    def close(self) -> None:
        """Stop redrawing (the pane is being replaced by its summary)."""
        with self._lock:
            self.closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


__all__ = ["LogTail", "LogView", "render_lines", "ALL"]
