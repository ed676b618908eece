"""What a worker hands to the function it runs: the task and a way to send events.

The worker sets it around each call of a training function; ``raynb.train``'s
``report()``, ``get_context()`` and ``get_checkpoint()`` read it. It is the one
thing the cluster layer shares with the code that runs on it, so the worker
never imports ``raynb.train`` (layers point one way: see CONTRIBUTING.md).
"""

from __future__ import annotations

import inspect
import sys
import threading
import traceback
import types
from typing import Any, Callable

_task: dict | None = None
_emit: Callable[..., None] | None = None
_state: dict[str, Any] = {}
_at_end: list[Callable[[str], None]] = []
_before_new_group: list[Callable[[], None]] = []
# An elastic run about to grow: its reports hold for the head's word (``report_gate``).
_gate = threading.Condition()
_gate_state: dict[str, Any] = {"on": False, "verdicts": {}}
# How long (s) a held report waits for the head's word before it goes on by itself.
GATE_WAIT_S = 30.0


class StopAttempt(BaseException):
    """Raised out of ``report()`` when the head stops the attempt there (an elastic run
    growing at a checkpoint): the worker ends the task as cancelled. A BaseException, so
    that the user's ``except Exception`` does not swallow it."""


def start(task: dict, emit: Callable[..., None]) -> None:
    """Enter a task: ``task`` is the head's ``run_task`` content (rank, world_size,
    local_rank, path, attempt, checkpoint, ...); ``emit(event, wait=False)`` queues an
    event for the head without blocking (``wait``: until it is on the socket)."""
    global _task, _emit, _state
    _task, _emit, _state = task, emit, {}
    _reset_gate()


def end(status: str = "ok") -> None:
    """Leave the task: functions that need one raise again. First the functions given
    to :func:`at_end` run, newest first, with ``status`` ("ok", "error", "cancelled")."""
    global _task, _emit, _state
    if _task is not None:  # a request that came too late for the task is not the next one's
        _checkpoint_requests.discard((_task.get("run_id"), _task.get("attempt", 0)))
    while _at_end:
        fn = _at_end.pop()
        try:
            fn(status)
        except Exception:  # noqa: BLE001 - a cleanup's bug is shown, never the worker's
            sys.stderr.write("raynb: a task's at_end function raised:\n" + traceback.format_exc())
            sys.stderr.flush()
    _task, _emit, _state = None, None, {}
    _reset_gate()


def _reset_gate() -> None:
    with _gate:
        _gate_state["on"], _gate_state["verdicts"] = False, {}
        _gate.notify_all()


def set_gate(content: dict) -> None:
    """(the worker's I/O thread) The head's ``report_gate``: ``{"gate": True}`` holds each
    report from now on; ``{"index": i, "stop": bool}`` is its word on report ``i``;
    ``{"gate": False}`` lets every held report go on."""
    with _gate:
        if "index" in content:
            _gate_state["verdicts"][int(content["index"])] = bool(content.get("stop"))
        else:
            _gate_state["on"] = bool(content["gate"])
        _gate.notify_all()


def gated() -> bool:
    """Whether reports hold for the head's word now."""
    return _gate_state["on"]


def await_verdict(index: int, timeout: float = GATE_WAIT_S) -> bool:
    """(the task's thread, after sending report ``index``) Wait for the head's word on it:
    True to stop the attempt there. The gate lifted, or no word within ``timeout``: False."""
    with _gate:
        _gate.wait_for(lambda: index in _gate_state["verdicts"] or not _gate_state["on"], timeout)
        return _gate_state["verdicts"].pop(index, False)


def at_end(fn: Callable[[str], None]) -> None:
    """Call ``fn(status)`` when the current task ends ("ok", "error" or "cancelled"): how
    a warm worker, which outlives the task, closes what the task opened (an MLflow run)."""
    if _task is None:
        raise RuntimeError("no task is running on this process")
    _at_end.append(fn)


_checkpoint_requests: set = set()  # (run_id, attempt): added by the I/O thread


def request_checkpoint(run_id: str, attempt: int) -> None:
    """(the worker's I/O thread) The driver asked the run's ranks for a checkpoint (a
    Callback set Ray's SHOULD_CHECKPOINT): :func:`checkpoint_requested` says so once."""
    _checkpoint_requests.add((run_id, attempt))


def checkpoint_requested() -> bool:
    """Whether the driver asked the running task for a checkpoint since this was last
    asked (True once per request)."""
    task = _task
    if task is None or not _checkpoint_requests:
        return False
    key = (task["run_id"], task.get("attempt", 0))
    if key not in _checkpoint_requests:
        return False
    _checkpoint_requests.discard(key)
    return True


def before_new_group(fn: Callable[[], None]) -> None:
    """Call ``fn()`` each time this worker is about to form a new process group (its old one
    destroyed, or gone), for the life of the process: how a library that caches subgroups
    of the group it first saw (DeepSpeed) forgets them, as a warm worker outlives its group."""
    if fn not in _before_new_group:
        _before_new_group.append(fn)


def new_group_coming() -> None:
    """Run the :func:`before_new_group` functions (the worker's rendezvous calls it)."""
    for fn in list(_before_new_group):
        try:
            fn()
        except Exception:  # noqa: BLE001 - a library's cleanup must not keep the group from forming
            sys.stderr.write("raynb: a before_new_group function raised:\n" + traceback.format_exc())
            sys.stderr.flush()


def current() -> dict | None:
    """The running task's content, or None outside a task."""
    return _task


def emit(event: dict, wait: bool = False) -> None:
    """Send ``event`` (a dict with ``kind``) to the head, queued on the worker's I/O thread;
    ``wait``: return once it is on the socket, so that it survives this process's death."""
    if _emit is None:
        raise RuntimeError("no task is running on this process")
    if wait:
        _emit(event, wait=True)
    else:
        _emit(event)


def state() -> dict[str, Any]:
    """Scratch state that lives as long as the current task (e.g. a report counter)."""
    return _state


def takes_config(fn) -> bool:
    """Whether a training function takes the config (Ray calls ``fn(config)`` when it
    takes an argument and ``fn()`` when it takes none)."""
    code = getattr(fn, "__code__", None)
    if (
        isinstance(fn, types.FunctionType)
        and code is not None
        and not {"__wrapped__", "__signature__", "__partialmethod__"} & fn.__dict__.keys()
    ):
        # What inspect.signature says of a plain function, without building it: this is on every run's path.
        return code.co_argcount > 0 or bool(code.co_flags & inspect.CO_VARARGS)
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)
