"""Work whose cost grows with user data, done off the head's loop.

The head is one thread around one socket: a handler that reads a run's whole
``result.json``, unpacks a job's working directory or hashes a checkpoint holds every
heartbeat, every other client's run and every node agent's sign of life for as long as
it takes. Such work goes here instead: :meth:`OffLoop.submit` runs ``work()`` on one of
a few worker threads, and ``done(result, error)`` on the loop once it is over (the
loop polls :attr:`OffLoop.wake_fd`, a pipe a finished job writes one byte to, and calls
:meth:`OffLoop.drain`). ``work`` must touch nothing the loop owns (the registry, the
runs, the socket): it gets what it needs as arguments, and ``done`` sends the reply.

The threads share the GIL with the loop: what they do in Python is kept small (records
read from the files' ends), and the heavy part of a job unpack runs in a child process
(``job_archive.unpack_in_child``). The process's switch interval is lowered to
``SWITCH_INTERVAL_S``, so the loop, woken by a message, waits that long at most for a
busy thread to hand the GIL over, not Python's default 5 ms, for each step of its answer.

At most ``MAX_PENDING`` jobs wait or run at once; more are refused at submit
(:class:`Busy`), so a client polling faster than its answers come cannot pile work up.
"""
from __future__ import annotations

import collections
import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

log = logging.getLogger("raynb.head")

# Worker threads: reads of run records and job unpacks overlap, and one slow job (an
# archive being unpacked) does not hold every dashboard's record behind it.
THREADS = 2
# Jobs waiting or running at once; beyond it a request is answered "busy".
MAX_PENDING = 64
# The head's GIL switch interval (s) while off-loop threads exist.
SWITCH_INTERVAL_S = 0.001


class Busy(RuntimeError):
    """Too much work is queued off the loop already; the request is refused (try again)."""


class OffLoop:
    """A small thread pool whose results the head's loop picks up (see the module doc)."""

    def __init__(self, threads: int = THREADS, max_pending: int = MAX_PENDING):
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="raynb-offloop")
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._done: collections.deque = collections.deque()  # (done, result, error), loop-bound
        self._lock = threading.Lock()
        self._pending = 0
        self.max_pending = max_pending
        self.completed = 0

    @property
    def wake_fd(self) -> int:
        """The file descriptor the loop polls: readable once a job has finished."""
        return self._read_fd

    @property
    def pending(self) -> int:
        with self._lock:
            return self._pending

    def submit(self, work: Callable[[], object], done: Callable[[object, BaseException | None], None]) -> None:
        """Run ``work()`` on a worker thread; then ``done(result, None)``, or
        ``done(None, error)`` when it raised, on the loop (at its next :meth:`drain`).

        Raises:
            Busy: ``max_pending`` jobs are waiting or running already.
        """
        with self._lock:
            if self._pending >= self.max_pending:
                raise Busy(f"the head has {self._pending} requests in progress already; try again in a moment")
            self._pending += 1
        self._pool.submit(self._run, work, done)

    def _run(self, work, done) -> None:
        try:
            item = (done, work(), None)
        except BaseException as e:  # noqa: BLE001 - handed to done on the loop
            item = (done, None, e)
        self._done.append(item)
        try:
            os.write(self._write_fd, b"x")
        except BlockingIOError:
            pass   # the pipe is full of wake-ups already: the loop will drain

    def drain(self) -> int:
        """(the loop) Call ``done`` of each finished job; returns how many."""
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass
        count = 0
        while self._done:
            done, result, error = self._done.popleft()
            with self._lock:
                self._pending -= 1
            count += 1
            try:
                done(result, error)
            except Exception:  # noqa: BLE001 - one reply's failure is not the head's
                log.exception("finishing an off-loop job failed")
        self.completed += count
        return count

    def close(self) -> None:
        """Stop taking work; running jobs finish in their threads (not waited for)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        for fd in (self._read_fd, self._write_fd):
            try:
                os.close(fd)
            except OSError:
                pass
