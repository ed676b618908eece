"""What the notebook sees of an exception raised by the user's function on a rank."""
from __future__ import annotations

import os
import socket
import traceback

from .notebook_main import with_pickling_hint

# raynb's own frames (the worker's) are left out of the traceback shown.
_WORKER_FILE = os.path.join(os.path.dirname(os.path.realpath(__file__)), "worker.py")


def format_remote_error(exc: BaseException, rank: int) -> dict:
    """Describe an exception raised by the user's function, for the notebook.

    raynb's own frames are dropped so the traceback starts at the user's code,
    whose line numbers are the cell's (the client compiled it that way).
    """
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not kill the worker
        message = "<exception str() failed>"
    tbe = traceback.TracebackException.from_exception(exc)
    tbe.stack = traceback.StackSummary.from_list(
        [f for f in tbe.stack if os.path.realpath(f.filename) != _WORKER_FILE])
    return {
        "rank": rank,
        "pid": os.getpid(),
        "hostname": socket.gethostname(),
        "exc_type": type(exc).__qualname__,
        "exc_module": type(exc).__module__,
        "message": with_pickling_hint(exc, message),
        "traceback": "".join(tbe.format()),
    }
