"""A plain script's SIGTERM ends its runs and its cluster, as a Ray driver's does.

Python's default action for SIGTERM ends the process at once: no ``finally``, no
``atexit``. A script stopped so (``kill``, ``timeout``, a batch scheduler's time limit)
left the run it followed going on the cluster with nobody following it, and the cluster
it had started (``launch.local.ensure_local_cluster``) running. ``ray.init()`` installs
a handler that exits instead (``sys.exit(signum)`` in ``ray/_private/worker.py``); raynb
does the same in a plain script: the ``SystemExit`` cancels the run being followed
(``client/submit_and_follow.py``; a Tune experiment's trials end PAUSED, as after an interrupt), and the
exit runs the stop that ``ensure_local_cluster`` registered.
"""

from __future__ import annotations

import signal
import sys
import threading

# What a shell reports for a process ended by SIGTERM (128 + 15).
SIGTERM_EXIT_STATUS = 128 + signal.SIGTERM


def _exit(signum, frame) -> None:
    sys.exit(SIGTERM_EXIT_STATUS)


def exit_on_sigterm() -> bool:
    """Make SIGTERM raise ``SystemExit(143)`` in this process, where that is safe.

    Only in a plain script (IPython and Jupyter kernels manage their own signals), only
    from the main thread (``signal.signal`` raises elsewhere), and never over a handler
    the program installed: only Python's default action is replaced.

    Returns:
        bool: whether SIGTERM now raises ``SystemExit`` (this handler, installed now or before).
    """
    from ..cluster.launch.local import interactive

    if interactive() or threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(signal.SIGTERM)
    if current is _exit:
        return True
    if current is not signal.SIG_DFL:
        return False
    signal.signal(signal.SIGTERM, _exit)
    return True
