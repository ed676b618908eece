"""Ray Train v2's error classes (``ray.train.WorkerGroupError``, ``ControllerError``,
``NCCLHangError``, ``PreemptionError``), as raynb defines them, and the one a failed run
raises (:func:`run_error`).

Each subclasses :class:`raynb.RunError` (``raynb.train.TrainingFailedError``, itself a
``RayTrainError``), so one exception answers both an ``except RunError`` (``run_name``,
``errors``, ``result``, ``state``, its message) and the ``except WorkerGroupError`` /
``except ControllerError`` of a Ray user (``worker_failures``, ``controller_failure``).
They take Ray's constructor arguments, so code that raises them runs unchanged.
"""

from __future__ import annotations

import base64

import cloudpickle

from ..errors import ClusterError, RunError


class RemoteRankError(RuntimeError):
    """A rank's failure that could not come back as itself: an exception that did not
    pickle (or unpickle here), or a worker that died (a signal, an exit, its node lost).

    Attributes:
        rank (int | None): the world rank.
        exc_type (str | None): the exception's class name (None: the worker died).
        exc_module (str | None): the module of that class.
        message (str): its message, or how the worker died.
        traceback (str): the traceback formatted on the rank ("" for a death).
    """

    def __init__(self, message: str, rank=None, exc_type=None, exc_module=None, traceback: str = ""):
        super().__init__(message)
        self.message, self.rank = message, rank
        self.exc_type, self.exc_module, self.traceback = exc_type, exc_module, traceback or ""

    def __str__(self) -> str:
        return f"{self.exc_type}: {self.message}" if self.exc_type else self.message

    def __reduce__(self):
        return (self.__class__, (self.message, self.rank, self.exc_type, self.exc_module, self.traceback))


def rank_exception(error: dict) -> BaseException:
    """The exception a rank's error record stands for: the rank's own exception when it
    came pickled and unpickles here, else a :class:`RemoteRankError` with its text."""
    data = error.get("exc_pickle")
    if data:
        try:
            exc = cloudpickle.loads(base64.b64decode(data))
        except Exception:  # noqa: BLE001 - a class this process lacks, a broken __setstate__
            exc = None
        if isinstance(exc, BaseException):
            return exc
    return RemoteRankError(
        str(error.get("message", "")),
        error.get("rank"),
        error.get("exc_type"),
        error.get("exc_module"),
        error.get("traceback") or "",
    )


def worker_failures_of(errors: list) -> dict:
    """``{world rank: exception}`` of a run's ``errors`` (the first failure of each rank)."""
    failures = {}
    for e in errors or ():
        rank = e.get("rank")
        if isinstance(rank, int) and rank not in failures:
            failures[rank] = rank_exception(e)
    return failures


class WorkerGroupError(RunError):
    """Training failed because ranks raised or died (Ray's ``WorkerGroupError``).

    Args:
        error_message (str): what failed, for people.
        worker_failures (dict[int, Exception]): world rank -> the exception it raised
            (a :class:`RemoteRankError` for a death or an exception that did not unpickle).
    """

    def __init__(self, error_message: str, worker_failures: dict):
        self._error_message = error_message
        self.worker_failures = dict(worker_failures or {})
        errors = [
            {"rank": r, "exc_type": type(e).__name__, "message": str(e)}
            for r, e in self.worker_failures.items()
        ]
        super().__init__("", errors)
        self.args = ("Training failed due to worker errors:\n" + error_message,)

    def __str__(self) -> str:
        if self.run_name:  # raised by fit(): RunError's message, with the remote traceback
            return RunError.__str__(self)
        return self.args[0]

    def __reduce__(self):
        return (self.__class__, (self._error_message, self.worker_failures), self.__dict__)


class NCCLHangError(WorkerGroupError):
    """NCCL's RAS found the job hung (Ray's ``NCCLHangError``). raynb does not detect it
    itself: a hung collective is cut by ``NCCL_TIMEOUT`` / torch's process-group timeout,
    which raises on the rank."""


class ControllerError(RunError):
    """Training failed in the controller, not in a rank (Ray's ``ControllerError``): on
    raynb, the head ended the run (no room to place it, the head stopped or died, its
    record could not be written, a cancel from elsewhere).

    Args:
        controller_failure (Exception): what the controller raised (from ``fit()``: a
            :class:`raynb.ClusterError` with the head's message).
    """

    def __init__(self, controller_failure: Exception):
        self.controller_failure = controller_failure
        super().__init__("", [{"message": f"{type(controller_failure).__name__}: {controller_failure}"}])
        self.args = ("Training failed due to controller error:\n" + str(controller_failure),)
        self.with_traceback(controller_failure.__traceback__)

    def __str__(self) -> str:
        if self.run_name:
            return RunError.__str__(self)
        return self.args[0]

    def __reduce__(self):
        return (self.__class__, (self.controller_failure,), self.__dict__)


def run_error(run_name: str, errors: list, result=None, state: str = "FAILED") -> RunError:
    """The error a failed or cancelled run raises: a :class:`WorkerGroupError` when its
    first failure is a rank's (an exception, a death: a lost node's ranks too, as Ray's
    health check reports a dead worker actor), else a :class:`ControllerError`. Either
    carries ``RunError``'s attributes and message."""
    errors = list(errors or [])
    first = errors[0] if errors else {}
    if isinstance(first.get("rank"), int):
        exc = WorkerGroupError.__new__(WorkerGroupError)
        exc.worker_failures = worker_failures_of(errors)
    else:
        exc = ControllerError.__new__(ControllerError)
        why = first.get("message") or f"run {run_name!r} {str(state).lower()}"
        exc.controller_failure = ClusterError(why)
    RunError.__init__(exc, run_name, errors, result, state)
    exc._error_message = exc._summary()
    return exc


class PreemptionError(RunError):
    """Training was cut by a node's preemption (Ray's ``PreemptionError``). raynb receives
    no preemption notices: a preempted node's ranks die, and ``FailureConfig(max_failures)``
    restarts the run from its latest checkpoint; the run's error then names the lost node.

    Args:
        preemption_info (PreemptionInfo): the preempted nodes and ranks.
        drain_timed_out (bool): whether the deadline passed with ranks still running.
    """

    def __init__(self, preemption_info, drain_timed_out: bool = False):
        self.preemption_info = preemption_info
        self.drain_timed_out = drain_timed_out
        ranks = getattr(preemption_info, "preempted_ranks", [])
        super().__init__("", [{"message": "node preemption"}])
        self.args = (
            f"Training was interrupted by node preemption (preempted_ranks={ranks}, "
            f"drain_timed_out={drain_timed_out}).",
        )

    def __str__(self) -> str:
        return self.args[0]

    def __reduce__(self):
        return (self.__class__, (self.preemption_info, self.drain_timed_out), self.__dict__)
