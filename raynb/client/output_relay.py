"""A followed run's output, written to the cell's stdout and stderr (``follow_run``)."""
from __future__ import annotations

import re
import sys
from collections import deque

from ..cluster.storage.rundir import OUTPUT_FILE

# A followed run's output shown in the cell: the first MAX_SHOWN_LINES lines as they come,
# then only the last TAIL_LINES, at the end (the run's output.log has every line).
MAX_SHOWN_LINES = 1000
TAIL_LINES = 20
# Output is written to the cell in chunks, at most this long after it arrived (s).
OUTPUT_FLUSH_S = 0.05


class OutputRelay:
    """Writes the ranks' output to the cell's stdout / stderr, each line tagged ``(rank N)``.

    A rank's unfinished line (``print(".", end="", flush=True)``) is continued
    without a second tag, and ended before another rank's output starts there.

    What a notebook holds stays bounded however much a run prints: text is written
    in coalesced chunks (one write and flush per `flush`, not per event), the first
    `MAX_SHOWN_LINES` lines are shown as they come, and past them only a count and
    the last `TAIL_LINES` are kept; `end` shows those, with where the full log is.
    """

    def __init__(self, all_ranks: bool, path: str | None = None):
        self.all_ranks = all_ranks
        self.path = path                  # the run directory, for the notices
        self._open: dict[str, int] = {}   # stream name -> rank whose line is unfinished
        self._pending: list[tuple[str, str]] = []   # (stream name, text) not written yet
        self.shown = 0                    # lines written (or pending) so far
        self.hidden = 0                   # lines past the cap, not shown
        self._tail: deque = deque(maxlen=TAIL_LINES)   # the newest hidden (stream, line)

    @staticmethod
    def _stream(name: str):
        return sys.stderr if name == "stderr" else sys.stdout

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def write(self, event: dict) -> None:
        """Take one output event (written at the next `flush`)."""
        rank = event.get("rank")
        if rank != 0 and not self.all_ranks:
            return
        name = "stderr" if event.get("stream") == "stderr" else "stdout"
        text = event.get("text", "")
        if not text:
            return
        open_rank = self._open.pop(name, None)
        out = ["\n"] if open_rank is not None and open_rank != rank else []
        for piece in re.findall(r"[^\n]*\n|[^\n]+", text):
            line = piece if open_rank == rank else f"(rank {rank}) {piece}"
            open_rank = None if piece.endswith("\n") else rank
            if self.shown < MAX_SHOWN_LINES:
                out.append(line)
                self.shown += piece.endswith("\n")
                if self.shown == MAX_SHOWN_LINES:
                    out.append(self._cap_notice())
                    open_rank = None
            elif piece.endswith("\n"):
                self.hidden += 1
                self._tail.append((name, f"(rank {rank}) {piece}"))
        if open_rank is not None:
            self._open[name] = open_rank
        if out:
            self._pending.append((name, "".join(out)))

    def _cap_notice(self) -> str:
        where = f"{self.path}/{OUTPUT_FILE}" if self.path else f"the run directory's {OUTPUT_FILE}"
        return (f"\n(raynb) {MAX_SHOWN_LINES} lines shown: further output is not shown here (the last "
                f"{TAIL_LINES} lines come when the run ends); the full log: {where}\n")

    def flush(self) -> None:
        """Write what was taken since the last flush: one write and flush per stream run."""
        pending, self._pending = self._pending, []
        i = 0
        while i < len(pending):
            name = pending[i][0]
            j = i
            while j < len(pending) and pending[j][0] == name:
                j += 1
            stream = self._stream(name)
            stream.write("".join(text for _, text in pending[i:j]))
            stream.flush()
            i = j

    def end(self, path: str | None = None) -> None:
        """Write the rest, then how many lines were not shown and the last of them, and
        end unfinished lines, so what the cell prints next starts on its own line."""
        self.path = path or self.path
        self.flush()
        for name in list(self._open):
            del self._open[name]
            self._stream(name).write("\n")
            self._stream(name).flush()
        if self.hidden:
            where = f"{self.path}/{OUTPUT_FILE}" if self.path else f"the run directory's {OUTPUT_FILE}"
            shown = min(self.hidden, TAIL_LINES)
            self._pending.append(("stdout", f"(raynb) ... {self.hidden - shown} lines not shown; the "
                                            f"full log: {where}\n"))
            self._pending.extend((self._tail.popleft() for _ in range(len(self._tail))))
            self.flush()
            self.hidden = 0
