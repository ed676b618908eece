"""A rank's torch threads: its share of its node's cores, kept up to date while it runs.

The head gives each task ``num_threads``, the node's cores over the ranks busy there
when it starts, and sends ``set_threads`` when that count changes (another trial
started or ended on the node). A run that started alone on two cores has two
threads; once three more one-rank trials join it, one.

The change must be made on the rank's main thread: OpenMP's and MKL's thread counts
belong to the calling thread, so ``torch.set_num_threads`` on the I/O thread that
receives the share would change nothing the function runs with. The I/O thread
therefore asks the main thread to take it at once (``_thread.interrupt_main`` with
:data:`NUDGE_SIGNAL`: no signal is sent, Python runs the handler on the main thread
between two lines of the function, never inside a torch call), and the main thread
also takes it at its next ``report()`` or line of output. Waiting for a report was
not enough: a trial that reports only at its end kept the threads it started with,
and the first of four trials placed on two cores ran its two threads against the
three others' one for its whole life.

A function (or a library it calls on the main thread) that calls
``torch.set_num_threads`` itself keeps its choice for the rest of the task, also when
it chose the share's own count.
"""

from __future__ import annotations

import _thread
import functools
import logging
import signal
import threading

log = logging.getLogger("raynb.worker")

# The signal whose Python handler takes a new share on the main thread. Never sent to
# the process: interrupt_main only runs its handler. A real-time signal, which nothing
# else in a worker uses (SIGINT is the cancel's); None where the platform has none
# (the share is then taken at the next report or line of output only).
NUDGE_SIGNAL = signal.SIGRTMIN + 4 if hasattr(signal, "SIGRTMIN") else None


class ThreadShare:
    def __init__(self):
        # The head's latest share, ((run_id, attempt), n): written by the I/O thread, also
        # before the task it is for has started here (then the task starts with it).
        self._latest: tuple | None = None
        self._task: tuple | None = None  # (run_id, attempt) of the running task
        self._ours: int | None = None  # what raynb set; None: the function chose its own
        self._applying = False
        self._main = threading.get_ident()
        self._handler = None

    def install(self) -> None:
        """On the main thread, at the worker's start: the handler that takes a new share
        between two lines of the running function."""
        if NUDGE_SIGNAL is None:
            return
        self._main = threading.get_ident()
        self._handler = self._on_nudge  # one object: compared with what getsignal returns
        signal.signal(NUDGE_SIGNAL, self._handler)

    def want(self, task: tuple, n: int) -> None:
        """From the I/O thread: the head's new share for ``task``; the main thread takes it
        as soon as it runs Python again."""
        self._latest = (task, n)
        # Only while our handler is the signal's: a function that put its own there must
        # not have it called.
        if self.pending and self._handler is not None and signal.getsignal(NUDGE_SIGNAL) is self._handler:
            _thread.interrupt_main(NUDGE_SIGNAL)

    def start(self, task: tuple, n: int) -> None:
        """Before the function, on the main thread: ``n`` threads, or the head's newer share."""
        import torch

        _track_own_choice(torch, self)
        latest = self._latest
        if latest is not None and latest[0] == task:
            n = latest[1]
        self._task, self._ours = task, n
        # Checked against torch itself, not what we last set: the previous run's code may
        # have called torch.set_num_threads, which must not leak into this run.
        if n != torch.get_num_threads():
            _original_set(torch)(n)

    def end(self) -> None:
        self._task = self._ours = None

    def chosen_by_function(self) -> None:
        """The running function called ``torch.set_num_threads`` on the main thread."""
        if threading.get_ident() == self._main:
            self._ours = None

    @property
    def pending(self) -> bool:
        """A new share to apply (cheap: checked on every event the main thread sends)."""
        latest = self._latest
        return (
            self._ours is not None
            and latest is not None
            and latest[0] == self._task
            and latest[1] != self._ours
        )

    def apply(self) -> None:
        """On the main thread: take the new share, unless the function set its own count."""
        if self._applying:  # the nudge's handler, run inside this call: the loop below sees it
            return
        self._applying = True
        try:
            self._take_latest()
        finally:
            self._applying = False

    def _take_latest(self) -> None:
        import torch

        while self.pending:
            latest, ours = self._latest, self._ours
            if latest is None or ours is None:
                return
            if torch.get_num_threads() != ours:
                self._ours = None  # set by a reference to torch's own function: it wins
                return
            _original_set(torch)(latest[1])
            self._ours = latest[1]

    def _on_nudge(self, signum, frame) -> None:
        # Runs inside the user's function: it must never raise into it.
        try:
            self.apply()
        except Exception:  # noqa: BLE001
            log.exception("taking the head's new thread share failed")


_original = None  # torch's own set_num_threads, once _track_own_choice replaced it


def _original_set(torch):
    return _original or torch.set_num_threads


def _track_own_choice(torch, share: ThreadShare) -> None:
    """``torch.set_num_threads`` notes a call on the main thread as the function's own choice
    (compared counts cannot tell a choice of the share's own count); once a process."""
    fn = torch.set_num_threads
    if getattr(fn, "_raynb_thread_share", None) is share:
        return
    global _original
    original = _original = _original_set(torch)

    @functools.wraps(original)
    def set_num_threads(n):
        share.chosen_by_function()
        return original(n)

    set_num_threads._raynb_thread_share = share
    torch.set_num_threads = set_num_threads
