"""Ray Train v2's error classes (``ray.train.WorkerGroupError``, ``ControllerError``,
``NCCLHangError``, ``PreemptionError``), as raynb defines them.

raynb's ``fit()`` raises :class:`raynb.RunError` (``raynb.train.TrainingFailedError``) with one
entry per failed rank in ``errors``. These classes subclass it, so ``except
TrainingFailedError`` catches them as in Ray, and carry Ray's constructor arguments and
attributes (``worker_failures``, ``controller_failure``, ``preemption_info``), so code that
raises or inspects them runs unchanged.
"""

from __future__ import annotations

from ..errors import RunError


class WorkerGroupError(RunError):
    """Training failed because ranks raised (Ray's ``WorkerGroupError``).

    Args:
        error_message (str): what failed, for people.
        worker_failures (dict[int, Exception]): world rank -> the exception it raised.
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
        return self.args[0]

    def __reduce__(self):
        return (self.__class__, (self._error_message, self.worker_failures))


class NCCLHangError(WorkerGroupError):
    """NCCL's RAS found the job hung (Ray's ``NCCLHangError``). raynb does not detect it
    itself: a hung collective is cut by ``NCCL_TIMEOUT`` / torch's process-group timeout,
    which raises on the rank."""


class ControllerError(RunError):
    """Training failed in the controller, not in a rank (Ray's ``ControllerError``): on
    raynb, the head or the driver's follow of the run.

    Args:
        controller_failure (Exception): what the controller raised.
    """

    def __init__(self, controller_failure: Exception):
        self.controller_failure = controller_failure
        super().__init__("", [{"message": f"{type(controller_failure).__name__}: {controller_failure}"}])
        self.args = ("Training failed due to controller error:\n" + str(controller_failure),)
        self.with_traceback(controller_failure.__traceback__)

    def __str__(self) -> str:
        return self.args[0]

    def __reduce__(self):
        return (self.__class__, (self.controller_failure,))


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
        return (self.__class__, (self.preemption_info, self.drain_timed_out))
