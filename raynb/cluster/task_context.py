"""What a worker hands to the function it runs: the task and a way to send events.

The worker sets it around each call of a training function; ``raynb.train``'s
``report()``, ``get_context()`` and ``get_checkpoint()`` read it. It is the one
thing the cluster layer shares with the code that runs on it, so the worker
never imports ``raynb.train`` (layers point one way: see CONTRIBUTING.md).
"""
from __future__ import annotations

import sys
import traceback
from typing import Any, Callable

_task: dict | None = None
_emit: Callable[[dict], None] | None = None
_state: dict[str, Any] = {}
_at_end: list[Callable[[str], None]] = []


def start(task: dict, emit: Callable[[dict], None]) -> None:
    """Enter a task: ``task`` is the head's ``run_task`` content (rank, world_size,
    local_rank, path, attempt, checkpoint, ...); ``emit(event)`` queues an event
    for the head without blocking."""
    global _task, _emit, _state
    _task, _emit, _state = task, emit, {}


def end(status: str = "ok") -> None:
    """Leave the task: functions that need one raise again. First the functions given
    to :func:`at_end` run, newest first, with ``status`` ("ok", "error", "cancelled")."""
    global _task, _emit, _state
    while _at_end:
        fn = _at_end.pop()
        try:
            fn(status)
        except Exception:  # noqa: BLE001 - a cleanup's bug is shown, never the worker's
            sys.stderr.write("raynb: a task's at_end function raised:\n" + traceback.format_exc())
            sys.stderr.flush()
    _task, _emit, _state = None, None, {}


def at_end(fn: Callable[[str], None]) -> None:
    """Call ``fn(status)`` when the current task ends ("ok", "error" or "cancelled"): how
    a warm worker, which outlives the task, closes what the task opened (an MLflow run)."""
    if _task is None:
        raise RuntimeError("no task is running on this process")
    _at_end.append(fn)


def current() -> dict | None:
    """The running task's content, or None outside a task."""
    return _task


def emit(event: dict) -> None:
    """Send ``event`` (a dict with ``kind``) to the head, queued on the worker's I/O thread."""
    if _emit is None:
        raise RuntimeError("no task is running on this process")
    _emit(event)


def state() -> dict[str, Any]:
    """Scratch state that lives as long as the current task (e.g. a report counter)."""
    return _state
