"""What the notebook sees of an exception raised by the user's function on a rank."""

from __future__ import annotations

import base64
import os
import socket
import traceback

import cloudpickle

from .notebook_main import with_pickling_hint

# raynb's own frames (the worker's, and those of the wrappers it ships around the user's
# function: ``hide_from_tracebacks``) are left out of the traceback shown.
_WORKER_FILE = os.path.join(os.path.dirname(os.path.realpath(__file__)), "worker.py")
_HIDDEN_CODE: set = set()


def hide_from_tracebacks(fn):
    """Leave ``fn``'s frames out of the tracebacks the notebook is shown (a wrapper that
    calls the user's function: datasets, profiling). Returns ``fn`` (usable as a decorator)."""
    _HIDDEN_CODE.add(fn.__code__)
    return fn


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
    frames = [frame for frame, _ in traceback.walk_tb(exc.__traceback__)]  # in tbe.stack's order
    tbe.stack = traceback.StackSummary.from_list(
        [
            f
            for f, frame in zip(tbe.stack, frames)
            if frame.f_code not in _HIDDEN_CODE and os.path.realpath(f.filename) != _WORKER_FILE
        ]
    )
    return {
        "rank": rank,
        "pid": os.getpid(),
        "hostname": socket.gethostname(),
        "exc_type": type(exc).__qualname__,
        "exc_module": type(exc).__module__,
        "message": with_pickling_hint(exc, message),
        "traceback": "".join(tbe.format()),
        **_pickled(exc),
    }


# An exception pickled past this stays behind: the notebook gets a stand-in with its
# type name and traceback text (it rides in every record of the run's errors).
MAX_EXC_PICKLE_BYTES = 16 << 10


def _pickled(exc: BaseException) -> dict:
    """``{"exc_pickle": base64 text}``: the exception itself, for ``WorkerGroupError``'s
    ``worker_failures`` in the notebook (cloudpickle: a class the notebook's cell defined
    comes back as that class); empty when it does not pickle or is too large."""
    try:
        data = cloudpickle.dumps(exc, protocol=5)
    except Exception:  # noqa: BLE001 - any exception may refuse pickling; the text still goes
        return {}
    if len(data) > MAX_EXC_PICKLE_BYTES:
        return {}
    return {"exc_pickle": base64.b64encode(data).decode("ascii")}
