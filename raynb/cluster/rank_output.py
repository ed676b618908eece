"""A worker's ``sys.stdout`` / ``sys.stderr`` while it runs a task: lines go to the
head (and on to the notebook) tagged with the stream's name."""
from __future__ import annotations

import io
import threading


class RankStream(io.TextIOBase):
    """sys.stdout / sys.stderr of a worker: lines go to the head while a run is live.

    Complete lines are sent as soon as they are written; a partial line waits
    for its newline, a flush(), or the end of the run.

    It is a text file for the user's code: ``close()`` flushes and closes it for the
    rest of the task (``write`` then raises ``ValueError`` as on any closed file), it
    is neither readable nor seekable. The worker reopens it (``reopen``) for each
    task and drains it (``drain``) at each task's end, closed or not, and never
    closes what it writes to outside a task (the log file on fds 1 and 2).
    """

    encoding = "utf-8"
    errors = "strict"

    def __init__(self, worker, name: str, fallback):
        super().__init__()
        self._worker = worker
        self._name = name
        self._fallback = fallback
        self._buf = ""
        self._lock = threading.Lock()
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
        with self._lock:
            self._buf += text
            if "\n" not in text:
                return len(text)
            head, _, self._buf = self._buf.rpartition("\n")
        self._worker.emit({"kind": "output", "stream": self._name, "text": head + "\n"})
        return len(text)

    def flush(self) -> None:
        self._check_open()
        self.drain()

    def drain(self) -> None:
        """Send the unfinished line, closed or not (the worker, at the end of a task)."""
        if self._worker.forked():
            return self._fallback.flush()
        with self._lock:
            text, self._buf = self._buf, ""
        if text and self._worker.current_task is not None:
            self._worker.emit({"kind": "output", "stream": self._name, "text": text})
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
