"""Telling the user's interrupt from a kernel restart or shutdown.

Jupyter's Restart and Shut Down (``jupyter_client``'s graceful ``restart_kernel()``
and ``shutdown_kernel()``) first interrupt the kernel (SIGINT, or an
``interrupt_request``) and send a ``shutdown_request`` on the control channel a
millisecond later. Both arrive as a KeyboardInterrupt in the cell. The user's
interrupt cancels the run; a restart must leave it running, to be followed again
with ``raynb.attach``, as a kernel killed outright does.

So the kernel's ``do_shutdown`` (ipykernel's override point, called on the
control thread) is wrapped to set an event, and an interrupt waits up to
:data:`SHUTDOWN_GRACE_S` for it before cancelling. Outside a Jupyter kernel (a
script, a terminal IPython) there is no such request, and an interrupt cancels at once.
"""

from __future__ import annotations

import sys
import threading

# How long an interrupt waits for a kernel's shutdown_request before it cancels (s).
# jupyter_client sends it right after the interrupt: it arrives well within this.
SHUTDOWN_GRACE_S = 0.2

_shutdown_requested = threading.Event()
_watched: set[int] = set()  # id() of the kernels whose do_shutdown is wrapped


def _running_kernel():
    """The ipykernel Kernel this process serves, or None (only looked up if IPython is loaded)."""
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    return getattr(get_ipython(), "kernel", None)


def watch_kernel_shutdown() -> bool:
    """Note a ``shutdown_request`` to the kernel this process serves, from now on.

    Idempotent; called before following a run. Returns False outside a Jupyter kernel.
    """
    kernel = _running_kernel()
    if kernel is None or not callable(getattr(kernel, "do_shutdown", None)):
        return False
    if id(kernel) not in _watched:
        original = kernel.do_shutdown

        def do_shutdown(restart, *args, **kwargs):
            _shutdown_requested.set()
            return original(restart, *args, **kwargs)

        kernel.do_shutdown = do_shutdown  # the instance attribute wins over the method
        _watched.add(id(kernel))
    return True


def interrupt_is_shutdown(grace_s: float = SHUTDOWN_GRACE_S) -> bool:
    """After a KeyboardInterrupt: True when it came with a kernel restart or shutdown.

    Waits up to ``grace_s`` for the ``shutdown_request`` that follows a restart's
    interrupt; returns at once outside a watched kernel. A second interrupt while
    waiting is the user's: False.
    """
    kernel = _running_kernel()
    if kernel is None or id(kernel) not in _watched:
        return False
    try:
        return _shutdown_requested.wait(grace_s)
    except KeyboardInterrupt:
        return False
