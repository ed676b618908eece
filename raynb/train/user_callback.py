"""Ray Train v2's ``UserCallback`` (``RunConfig(callbacks=[...])``) on raynb.

Ray calls ``after_report(run_context, metrics, checkpoint)`` on its controller once all ranks
made a report, and ``after_exception(run_context, worker_exceptions)`` when ranks raised.
raynb calls them in the notebook process, on the run's callback thread (as its Tune
``Callback`` hooks, which this class is built on): ``after_report`` once per report of
rank 0, with its checkpoint once the head committed it; ``after_exception`` once the run
failed with ranks' errors, ``{world rank: exception}`` (Ray calls it after each failed
attempt; raynb at the run's end, with each rank's first failure of its last fit).
``metrics`` holds rank 0's metrics (the other ranks' reports drive only their progress bars
and are not sent to the notebook). ``run_context`` is the trial's ``TrialSnapshot``
(``config``, ``path``, ``trial_id``, ``results``).

A report's checkpoint is committed once every rank made that report, and raynb's ranks do
not wait for each other at a report, so rank 0's metrics arrive first and whether a
checkpoint will follow is not known yet. A report is therefore held until its checkpoint
comes (matched by ``training_iteration``), or a later report's checkpoint comes (the head
commits in report order, so an earlier report still held had none), or the run ends, or
``HOLD_REPORTS`` newer reports came; then it is passed on with ``checkpoint=None``. A run
that saves no checkpoints thus sees ``after_report`` up to ``HOLD_REPORTS`` reports late.
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .experiment_callback import Callback
from .train_errors import worker_failures_of

HOLD_REPORTS = 16  # reports held back waiting for a checkpoint (a rank that lags further: None)


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
            worker_exceptions (dict[int, Exception]): world rank -> what it raised: the
                exception itself where it unpickles here, else a ``RemoteRankError``
                with its type name and traceback text (also for a rank that died).
        """

    def _held(self, trial) -> list:
        """The trial's reports waiting for their checkpoint (a Tuner's trials share a callback)."""
        if "_held_reports" not in self.__dict__:
            self._held_reports = {}
        return self._held_reports.setdefault(trial.trial_id, [])

    def on_trial_result(self, iteration, trials, trial, result: dict, **info) -> None:
        held = self._held(trial)
        held.append(dict(result))
        while len(held) > HOLD_REPORTS:
            self.after_report(trial, [held.pop(0)], None)

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info) -> None:
        metrics = getattr(checkpoint, "_report_metrics", None) or {}
        held = self._held(trial)
        step = metrics.get("training_iteration")
        at = next((i for i, r in enumerate(held) if r.get("training_iteration") == step), None)
        if at is None:  # its report was passed on already (a rank lagged), or a Tune restore
            self.after_report(trial, [dict(metrics)], checkpoint)
            return
        for r in held[:at]:
            self.after_report(trial, [r], None)
        self.after_report(trial, [held[at]], checkpoint)
        del held[: at + 1]

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        self._flush(trial)

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        self._flush(trial)
        # Ray calls it for a worker group's errors only: a run the head ended (no rank
        # failed: no room, the head stopped) gets no call, as a Ray controller's failure.
        failures = worker_failures_of(trial.errors or [])
        if failures:
            self.after_exception(trial, failures)

    def _flush(self, trial) -> None:
        held = self._held(trial)
        while held:
            self.after_report(trial, [held.pop(0)], None)
