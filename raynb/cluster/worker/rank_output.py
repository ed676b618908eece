"""A worker's ``sys.stdout`` / ``sys.stderr`` while it runs a task: lines go to the
head (and on to the notebook) tagged with the stream's name."""
from __future__ import annotations

import io
import itertools
import threading
import time

# Lines written within this long of the last message are sent together, in one
# message, this long after it (s). A rank printing 60,000 lines sent 60,000
# messages: the head, the notebook's connection and its relay handled each one,
# and the notebook fell seconds behind and grew by hundreds of MiB. A line
# printed after a quiet spell still goes at once.
COALESCE_S = 0.05
# A batch is sent as soon as it holds this many characters.
BATCH_CHARS = 64 * 1024


class OutputBatch:
    """The complete lines a worker's stdout and stderr have gathered, in the order they
    were written (one batch for both streams, so a warning printed between two lines
    of output stays between them).

    Lines go at once after a quiet spell, else together `COALESCE_S` later (by a timer
    thread) or as soon as `BATCH_CHARS` are waiting; each run of one stream's lines is
    one ``output`` event. ``lock`` guards the batch and both streams' partial lines.
    """

    def __init__(self, worker):
        self._worker = worker
        self.lock = threading.RLock()
        self._lines: list[tuple[str, str]] = []   # (stream name, text), oldest first
        self._chars = 0
        self._last_sent = -float("inf")
        self._timer: threading.Timer | None = None

    def add(self, stream: str, text: str, now: bool = False) -> None:
        """Queue ``text`` of ``stream``; send the batch unless it may wait (lock held)."""
        self._lines.append((stream, text))
        self._chars += len(text)
        wait = self._last_sent + COALESCE_S - time.monotonic()
        if now or wait <= 0 or self._chars >= BATCH_CHARS:
            self.send_locked()
        elif self._timer is None:
            self._timer = threading.Timer(wait, self.send)
            self._timer.daemon = True
            self._timer.start()

    def send(self) -> None:
        """Send what is queued now (any thread). Under the lock, so a drain at the end of a
        task returns only once a timer's batch went out."""
        with self.lock:
            self.send_locked()

    def send_locked(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        lines, self._lines, self._chars = self._lines, [], 0
        if not lines:
            return
        self._last_sent = time.monotonic()
        for stream, run in itertools.groupby(lines, key=lambda line: line[0]):
            self._worker.emit({"kind": "output", "stream": stream, "text": "".join(t for _, t in run)})


class RankStream(io.TextIOBase):
    """sys.stdout / sys.stderr of a worker: lines go to the head while a run is live.

    Complete lines join the worker's `OutputBatch` (sent at once after a quiet spell,
    else coalesced); a partial line waits for its newline, a flush(), or the end of
    the run. `send_pending` sends the batch now (the worker calls it before a report,
    so output printed before a report arrives before it).

    It is a text file for the user's code: ``close()`` flushes and closes it for the
    rest of the task (``write`` then raises ``ValueError`` as on any closed file), it
    is neither readable nor seekable. The worker reopens it (``reopen``) for each
    task and drains it (``drain``) at each task's end, closed or not, and never
    closes what it writes to outside a task (the log file on fds 1 and 2).
    """

    encoding = "utf-8"
    errors = "strict"

    def __init__(self, worker, name: str, fallback, batch: OutputBatch | None = None):
        super().__init__()
        self._worker = worker
        self._name = name
        self._fallback = fallback
        self._batch = batch if batch is not None else OutputBatch(worker)
        self._buf = ""                 # the unfinished line
        self._closed = False

    @property
    def name(self) -> str:
        return f"<{self._name}>"

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"I/O operation on closed file (sys.{self._name} was closed)")

    def write(self, text: str) -> int:
        self._check_open()
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if self._worker.current_task is None or self._worker.forked():
            return self._fallback.write(text)
        with self._batch.lock:
            self._buf += text
            if "\n" in text:
                head, _, self._buf = self._buf.rpartition("\n")
                self._batch.add(self._name, head + "\n")
        return len(text)

    def send_pending(self) -> None:
        """Send the complete lines gathered so far (any thread)."""
        self._batch.send()

    def flush(self) -> None:
        self._check_open()
        self.drain()

    def drain(self) -> None:
        """Send the gathered lines and the unfinished one, closed or not (the worker, at
        the end of a task)."""
        if self._worker.forked():
            return self._fallback.flush()
        with self._batch.lock:
            text, self._buf = self._buf, ""
            if text and self._worker.current_task is not None:
                self._batch.add(self._name, text, now=True)
            else:
                self._batch.send_locked()
        self._fallback.flush()

    def close(self) -> None:
        """Flush, then refuse writes until the worker reopens the stream for the next task."""
        if not self._closed:
            self.drain()
            self._closed = True

    def reopen(self) -> None:
        self._closed = False

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._fallback.fileno()

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def __del__(self) -> None:
        pass  # io's finalizer would close it; the worker owns it for its whole life
