"""Ray Train v2's ``UserCallback`` (``RunConfig(callbacks=[...])``) on raynb.

Ray calls ``after_report(run_context, metrics, checkpoint)`` on its controller once all ranks
made a report, and ``after_exception(run_context, worker_exceptions)`` when ranks raised.
raynb calls them in the notebook process, on the run's callback thread (as its Tune
``Callback`` hooks, which this class is built on): ``after_report`` once per report of
rank 0, with its checkpoint once the head committed it, ``after_exception`` once the run
failed. ``metrics`` holds rank 0's metrics (the other ranks' reports drive only their
progress bars and are not sent to the notebook). ``run_context`` is the trial's
``TrialSnapshot`` (``config``, ``path``, ``trial_id``, ``results``).
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .experiment_callback import Callback

_NONE = object()


class UserCallback(Callback):
    """Override ``after_report`` and ``after_exception`` (Ray's hooks)."""

    def after_report(self, run_context, metrics: list, checkpoint: Checkpoint | None) -> None:
        """After a report of every rank.

        Args:
            run_context (TrialSnapshot): the run as the notebook sees it.
            metrics (list[dict]): ``[rank 0's metrics]``.
            checkpoint (Checkpoint | None): the report's committed checkpoint, or None.
        """

    def after_exception(self, run_context, worker_exceptions: dict) -> None:
        """After the run failed.

        Args:
            run_context (TrialSnapshot): the run as the notebook sees it.
            worker_exceptions (dict[int, Exception]): world rank -> what it raised (the
                first failure, its rank's remote error as a ``RuntimeError``).
        """

    # A report's checkpoint is committed after every rank made that report, so rank 0's
    # metrics come first: they are held until the checkpoint or the next report comes.
    def on_trial_result(self, iteration, trials, trial, result: dict, **info) -> None:
        self._flush(trial)
        self._held = dict(result)

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info) -> None:
        held, self._held = getattr(self, "_held", _NONE), _NONE
        self.after_report(trial, [held if held is not _NONE else {}], checkpoint)

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        self._flush(trial)

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        self._flush(trial)
        self.after_exception(trial, {0: RuntimeError(trial.error or "the run failed")})

    def _flush(self, trial) -> None:
        held, self._held = getattr(self, "_held", _NONE), _NONE
        if held is not _NONE:
            self.after_report(trial, [held], None)
