"""A worker's ``sys.stdout`` / ``sys.stderr`` while it runs a task: lines go to the
head (and on to the notebook) tagged with the stream's name."""
from __future__ import annotations

import threading


class RankStream:
    """sys.stdout / sys.stderr of a worker: lines go to the head while a run is live.

    Complete lines are sent as soon as they are written; a partial line waits
    for its newline, a flush(), or the end of the run.
    """

    def __init__(self, worker, name: str, fallback):
        self._worker = worker
        self._name = name
        self._fallback = fallback
        self._buf = ""
        self._lock = threading.Lock()
        self.encoding = "utf-8"

    def write(self, text: str) -> int:
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
        if self._worker.forked():
            return self._fallback.flush()
        with self._lock:
            text, self._buf = self._buf, ""
        if text and self._worker.current_task is not None:
            self._worker.emit({"kind": "output", "stream": self._name, "text": text})
        self._fallback.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._fallback.fileno()

    def writable(self) -> bool:
        return True
