"""Run progress as text lines, for terminals, scripts and plain IPython.

The same information as the Jupyter pane, as a compact status line printed at
most every ``min_interval_s``, plus one line per state change and per note,
and the model's summary lines when the run ends.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, TextIO

from ..formatting import fmt_bytes, fmt_duration, fmt_range, fmt_value
from .model import RunProgress

MAX_METRICS = 6  # keep the status line to one terminal line, roughly


class TextProgress:
    """A text view over a `RunProgress`, with the same methods as `ProgressPane`.

    Args:
        progress: the model; `handle` feeds it.
        stream: where lines go; None means whatever ``sys.stdout`` is at the
            time of writing (so redirection and capture keep working).
        min_interval_s: least seconds between two status lines.
        quiet_s: with no new report, a status line is still printed this
            often (seconds) so a long silent step does not look like a hang.
        clock: monotonic seconds, injectable for tests.
    """

    def __init__(
        self,
        progress: RunProgress,
        stream: TextIO | None = None,
        min_interval_s: float = 2.0,
        quiet_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.progress = progress
        self._stream = stream
        self.min_interval_s = float(min_interval_s)
        self.quiet_s = float(quiet_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._last_line = -float("inf")  # last status line
        self._last_any = -float("inf")  # last line of any kind (state, note, status)
        self._printed_reports = 0
        self._last_state: str | None = None
        self.finished = False
        self.lines_printed = 0

    def display(self) -> None:
        """Nothing to set up: lines appear as events arrive."""

    def handle(self, event: dict) -> None:
        """Feed one run event to the model; print a line for a state change or
        a note, else a throttled status line."""
        p = self.progress
        n_notes = len(p.notes)
        p.on_event(event)
        kind = event.get("kind") if isinstance(event, dict) else None
        if kind == "state" and p.state != self._last_state:
            self._last_state = p.state
            self._last_any = self._clock()
            # An end state is the first of the summary lines finish() prints (its message
            # there or in the RunError): a line here too printed FINISHED twice per run.
            if not p.finished:
                self._write(f"[{p.run_name}] {p.state}" + (f": {p.message}" if p.message else ""))
        elif kind == "note":
            for note in p.notes[n_notes:]:
                self._write(f"[{p.run_name}] note: {note}")
        elif kind == "stats" or (kind == "report" and str(event.get("rank")) == "0"):
            # Other ranks' reports only feed the model (the next stats sample, once
            # a second, shows them): a line started by rank 1 would lack the metrics.
            self.refresh()

    def refresh(self, force: bool = False) -> bool:
        """Print the status line if ``force``, or if ``min_interval_s`` has
        passed and there is a new report (or ``quiet_s`` has passed).
        Returns whether a line was printed."""
        p = self.progress
        now = self._clock()
        with self._lock:
            if self.finished:
                return False
            since = now - self._last_line
            fresh = p.report_count != self._printed_reports
            # Without a new report, a line only every quiet_s, counted from any line:
            # a stats sample right after "[run] RUNNING" adds nothing worth a line.
            quiet = now - max(self._last_line, self._last_any)
            if not force and (since < self.min_interval_s or (not fresh and quiet < self.quiet_s)):
                return False
            self._last_line = self._last_any = now
            self._printed_reports = p.report_count
        self._write(self.status_line())
        return True

    def status_line(self) -> str:
        """E.g. ``[run] RUNNING 12.3s | epoch 3/10 | loss=0.231 | rank0 52% 180 MiB``;
        with more than two ranks the last field is their ranges,
        ``4 ranks 20-28% 255-262 MiB`` (CPU, RSS)."""
        p = self.progress
        parts = [f"[{p.run_name}] {p.state} {fmt_duration(p.elapsed_s)}"]
        if p.report_count:
            parts.append(p.progress_text())
        metrics = p.ordered_metrics(compact=True)[:MAX_METRICS]
        if metrics:
            parts.append(" ".join(f"{k}={fmt_value(v)}" for k, v in metrics))
        stats = p.worker_stats
        if 0 < len(stats) <= 2:
            parts.append(
                " ".join(
                    f"rank{r} {'?' if s['cpu_percent'] is None else format(s['cpu_percent'], '.0f')}% "
                    f"{fmt_bytes(s['rss'])}"
                    for r, s in stats.items()
                )
            )
        elif stats:  # '4 ranks 20-28% 255-262 MiB': one field however many ranks
            cpu = fmt_range((s["cpu_percent"] for s in stats.values()), lambda c: f"{c:.0f}%")
            rss = fmt_range((s["rss"] for s in stats.values()), fmt_bytes)
            parts.append(f"{len(stats)} ranks {cpu} {rss}")
        return " | ".join(parts)

    def finish(self) -> None:
        """Print the run's summary lines (once)."""
        with self._lock:
            if self.finished:
                return
            self.finished = True
        for line in self.progress.summary_lines():
            self._write(line)

    def _write(self, line: str) -> None:
        stream = self._stream if self._stream is not None else sys.stdout
        stream.write(line + "\n")
        stream.flush()
        self.lines_printed += 1


__all__ = ["TextProgress"]
