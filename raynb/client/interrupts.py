"""A Ctrl-C that pyzmq swallowed, raised again where the client waits.

pyzmq checks for signals when it frees a received frame (``Frame.__dealloc__`` calls
``_check_rc``, which calls ``PyErr_CheckSignals``). A SIGINT that arrives just then runs
Python's handler inside the deallocator, and the KeyboardInterrupt it raises is
discarded ("Exception ignored in: 'zmq.backend.cython._zmq.Frame.__dealloc__'"): the
cell went on following its run as though nobody had pressed Ctrl-C.

So while the client waits on a run (``follow_run``, Tune's loop), SIGINT's handler is
wrapped: it notes the interrupt, then calls the handler it replaced (which raises as
before). The waiting loop wakes at least every ``CHECK_S`` and raises an interrupt that
was noted but never reached it (``raise_noted``).
"""

from __future__ import annotations

import signal
import threading

try:  # signal's own C functions: its wrappers convert every handler to and from an enum
    from _signal import getsignal as _getsignal
    from _signal import signal as _setsignal
except ImportError:  # another Python than CPython
    _getsignal, _setsignal = signal.getsignal, signal.signal

# The longest a swallowed interrupt waits to be raised again (s): the waiting loops
# poll their socket in slices at most this long.
CHECK_S = 0.25


class NotedInterrupts:
    """Context manager: SIGINT noted while inside (main thread only; elsewhere a no-op,
    as signals reach only the main thread).

    ``raise_noted()`` raises ``KeyboardInterrupt`` for an interrupt noted and not yet
    handled; ``handled()`` says the loop caught one (so it is not raised twice).

    Args:
        on_noted (callable | None): also called for each interrupt noted (Tune's loop: its
            ``interrupt()``, which the loop acts on where it would act on another thread's).
    """

    def __init__(self, on_noted=None):
        self.on_noted = on_noted
        self.pending = False
        self._previous = None
        self._noted = None  # the wrapper installed, while it is

    def __enter__(self) -> "NotedInterrupts":
        if threading.current_thread() is not threading.main_thread():
            return self
        previous = _getsignal(signal.SIGINT)
        if not callable(previous):  # SIG_IGN / SIG_DFL / unknown: nothing raises, nothing to note
            return self
        self._previous = previous

        def noted(signum, frame):
            self.pending = True
            if self.on_noted is not None:
                self.on_noted()
            previous(signum, frame)

        _setsignal(signal.SIGINT, noted)
        self._noted = noted
        return self

    def __exit__(self, *exc) -> None:
        # Put back only over our own wrapper: a handler set since (the kernel's) stays.
        if self._noted is not None and _getsignal(signal.SIGINT) is self._noted:
            _setsignal(signal.SIGINT, self._previous)
        self._noted = None

    def raise_noted(self) -> None:
        """Raise ``KeyboardInterrupt`` if an interrupt was noted and never reached the loop."""
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    def handled(self) -> None:
        """The loop caught the interrupt: it is not raised again."""
        self.pending = False
