"""The driver's view of ``RunConfig(stop=...)`` and ``FailureConfig(fail_fast=...)``.

:class:`StoppingScheduler` wraps the experiment's scheduler: after each report it asks the
stopper first, as Ray Tune's controller does (a trial its stopper stops never reaches the
scheduler's decision), and it tells the driver when the whole experiment ends
(``experiment_stop_reason``): the stopper's ``stop_all()``, or a trial's error under
``fail_fast``.
"""

from __future__ import annotations

from .schedulers.trial_scheduler import STOP
from .stopper import Stopper


class StoppingScheduler:
    """``scheduler`` with ``stopper`` asked first and ``fail_fast`` watched (every other
    call goes to ``scheduler`` unchanged).

    Args:
        scheduler: the experiment's TrialScheduler.
        stopper (Stopper | None): ``as_stopper(RunConfig.stop)``.
        fail_fast (bool | "raise"): ``FailureConfig.fail_fast``.
    """

    def __init__(self, scheduler, stopper: Stopper | None, fail_fast=False):
        self._scheduler, self._stopper, self._fail_fast = scheduler, stopper, fail_fast
        self.failed_trial = None  # the first trial in ERROR, under fail_fast

    def __getattr__(self, name):
        return getattr(self._scheduler, name)

    @property
    def __class__(self):  # messages and isinstance checks name the user's scheduler
        return type(self._scheduler)

    def on_trial_result(self, trial, result: dict):
        if self._stopper is not None and self._stopper(trial.trial_id, result):
            return STOP
        return self._scheduler.on_trial_result(trial, result)

    def on_trial_error(self, trial) -> None:
        self._scheduler.on_trial_error(trial)
        if self._fail_fast and self.failed_trial is None:
            self.failed_trial = trial

    def experiment_stop_reason(self) -> str | None:
        """Why every trial stops now, or None."""
        if self.failed_trial is not None:
            return f"FailureConfig(fail_fast={self._fail_fast!r}): trial {self.failed_trial.trial_id} failed"
        if self._stopper is not None and self._stopper.stop_all():
            return f"{type(self._stopper).__name__}.stop_all() said to stop the experiment"
        return None

    @property
    def raise_on_failure(self) -> bool:
        """fit() raises the failed trial's error (``fail_fast="raise"``)."""
        return self._fail_fast == "raise" and self.failed_trial is not None
