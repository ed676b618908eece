"""Exceptions raised in the notebook for things that went wrong on the cluster."""

from __future__ import annotations

import linecache
import traceback

# Frames of these packages are left out of the tracebacks IPython shows for raynb's
# errors: an interrupt or an unpicklable variable printed 25-35 lines of magics.py,
# runner.py and shipping.py before the one line that matters.
_INTERNAL_PACKAGES = ("raynb", "IPython", "ipykernel", "traitlets")


class RayTrainError(Exception):
    """The base of Ray Train's errors (Ray's ``RayTrainError``), so ``except`` naming it
    catches a failed run as in Ray."""


class RunError(RayTrainError, RuntimeError):
    """A distributed run failed (as Ray Train's ``TrainingFailedError``).

    ``fit()`` raises one of its subclasses: ``raynb.train.WorkerGroupError`` when ranks
    raised or died, ``raynb.train.ControllerError`` when the head ended the run.

    Attributes:
        run_name (str): the run's name (its directory under the storage path).
        errors (list[dict]): one entry per failure, in order. A rank's exception has
            ``rank``, ``pid``, ``hostname``, ``exc_type``, ``message`` and the remote
            ``traceback`` (formatted, with the cell's own line numbers); a dead worker
            has ``rank``, ``pid``, ``signal`` or ``exitcode`` and ``message``.
        result: the run's ``Result`` (metrics reported before the failure), or None.

    In IPython the remote traceback is what gets shown (``_render_traceback_``).
    """

    def __init__(self, run_name: str, errors: list[dict], result=None, state: str = "FAILED"):
        self.run_name = run_name
        self.errors = list(errors or [])
        self.result = result
        self.state = state
        super().__init__(self._summary())

    def _summary(self) -> str:
        if not self.errors:
            return f"run {self.run_name!r} {self.state.lower()}"
        parts = []
        for e in self.errors:
            if e.get("exc_type"):
                parts.append(f"rank {e.get('rank')} raised {e['exc_type']}: {e.get('message', '')}")
            else:
                parts.append(e.get("message", repr(e)))
        return f"run {self.run_name!r} failed: " + "; ".join(parts)

    def __reduce__(self):
        # The default reduce calls RunError(message): its arguments are these.
        return (self.__class__, (self.run_name, self.errors, self.result, self.state))

    @property
    def rank(self) -> int | None:
        """The rank of the first failure."""
        return self.errors[0].get("rank") if self.errors else None

    @property
    def remote_traceback(self) -> str:
        """The first failing rank's traceback, as formatted on the worker."""
        for e in self.errors:
            if e.get("traceback"):
                return e["traceback"]
        return ""

    def _render_traceback_(self) -> list[str]:
        lines = [f"RunError: {self._summary()}", ""]
        for e in self.errors:
            if e.get("traceback"):
                lines.append(
                    f"--- remote traceback (rank {e.get('rank')}, pid {e.get('pid')} "
                    f"on {e.get('hostname')}) ---"
                )
                lines.extend(e["traceback"].rstrip("\n").splitlines())
                lines.append("")
        return lines

    def __str__(self) -> str:
        tb = self.remote_traceback
        return self._summary() + (f"\n\nRemote traceback (rank {self.rank}):\n{tb}" if tb else "")


class ClusterError(RuntimeError):
    """The cluster could not be started, reached or used (says why and what to do)."""


def _internal(frame) -> bool:
    name = frame.f_globals.get("__name__") or ""
    return name.split(".")[0] in _INTERNAL_PACKAGES


def _frame_label(filename: str, lineno: int, func: str) -> str:
    """'Cell In[3], line 1' for a notebook cell (as IPython writes it), else the usual."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        named = shell.compile.format_code_name(filename) if shell is not None else None
    except Exception:  # noqa: BLE001 - outside IPython, or an IPython without the map
        named = None
    if named:
        return f"{named[0]} {named[1]}, line {lineno}"
    return f'File "{filename}", line {lineno}, in {func}'


# How IPython rewrites a line or cell magic: the cell's frame shows this call with the
# whole cell source as one escaped string.
_MAGIC_CALLS = ("get_ipython().run_cell_magic(", "get_ipython().run_line_magic(")


def user_traceback(exc: BaseException, name: str | None = None, hide_magic_calls: bool = False) -> list[str]:
    """``exc``'s traceback as IPython shows it through ``_render_traceback_``: the user's
    own frames (the cell, their modules), none of raynb's or IPython's, then
    ``Type: message`` (``name`` instead of the type's). ``hide_magic_calls``: leave out
    a cell frame that only calls a magic (``%%ray_train``: its source is the whole cell)."""
    lines = []
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if _internal(frame):
            continue
        code = frame.f_code
        source = linecache.getline(code.co_filename, lineno, frame.f_globals).strip()
        if hide_magic_calls and source.startswith(_MAGIC_CALLS):
            continue
        lines.append(_frame_label(code.co_filename, lineno, code.co_name))
        if source:
            lines.append(f"----> {source}")
    if lines:
        lines.append("")
    return lines + [f"{name or type(exc).__name__}: {exc}"]


class RunInterrupted(KeyboardInterrupt):
    """The kernel was interrupted while a run was followed: every rank was cancelled
    (or, for an attached run, this process stopped following it). A
    ``KeyboardInterrupt``, shown without raynb's frames, and named as one: a kernel's
    error message says ``KeyboardInterrupt``, as for any interrupted cell. Where the
    interrupt met a magic (``%%ray_train``), only the message: the cell's frame would
    repeat the whole cell as one string."""

    def _render_traceback_(self) -> list[str]:
        return user_traceback(self, hide_magic_calls=True)


RunInterrupted.__name__ = RunInterrupted.__qualname__ = "KeyboardInterrupt"


class TuneInterrupted(KeyboardInterrupt):
    """A notebook interrupt (the stop button, Ctrl-C) ended ``Tuner.fit()`` in an IPython
    cell: the running trials were cancelled (PAUSED, resumable) and the cell fails, so
    *Run All* stops at it as after any interrupted cell. A ``KeyboardInterrupt``, named
    as one; IPython shows only its message.

    Attributes:
        result_grid: the ``ResultGrid`` of the results so far (also ``tuner.get_results()``;
            ``%%ray_tune`` binds it to its ``--result`` name, default ``_ray_tune_result``).
    """

    def __init__(self, message: str, result_grid=None):
        super().__init__(message)
        self.result_grid = result_grid

    def _render_traceback_(self) -> list[str]:
        return user_traceback(self, hide_magic_calls=True)


TuneInterrupted.__name__ = TuneInterrupted.__qualname__ = "KeyboardInterrupt"
