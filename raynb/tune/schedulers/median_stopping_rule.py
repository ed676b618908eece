"""Median stopping rule (Golovin et al. 2017, Google Vizier), Ray's semantics."""

from __future__ import annotations

import numpy as np

from .trial_scheduler import CONTINUE, STOP, TrialScheduler


class MedianStoppingRule(TrialScheduler):
    """Stop a trial whose best result is worse than the median of the others' running means.

    Golovin, Solnik, Moitra, Kochanski, Karro, Sculley, "Google Vizier: A Service for
    Black-Box Optimization", KDD 2017, section 3.2.1. As Ray Tune's ``MedianStoppingRule``:
    at a report at time ``t >= grace_period``, take every other trial that has reached
    ``t`` (running, finished or failed); if there are at least ``min_samples_required``,
    compute each one's running mean of the metric over reports with
    ``grace_period <= time_attr <= t``; the trial stops if ``t > grace_period`` and its best
    result so far is worse than the median of those means.

    Args:
        time_attr (str): result key measuring progress ("time_total_s", seconds, by default).
        metric (str | None): result key to optimise; may come from TuneConfig instead.
        mode (str | None): "min" or "max"; may come from TuneConfig instead.
        grace_period (float): no trial is stopped before this much ``time_attr``.
        min_samples_required (int): fewest other trials needed for a decision.
        min_time_slice (float): accepted for Ray compatibility; in Ray it sets how long a
            trial runs between PAUSEs, and raynb never pauses, so it has no effect.
        hard_stop (bool): True: STOP. False (Ray: PAUSE the trial and resume it when the
            others are done): raynb has no PAUSE, so the trial is only marked (see
            ``would_stop``) and CONTINUEs.

    Raises:
        ValueError: bad ``mode``, negative ``grace_period``/``min_time_slice``,
            ``min_samples_required < 1``; and, on a result, a missing metric/mode or a metric
            not among the reported keys.
    """

    _needs_metric = True

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        grace_period: float = 60.0,
        min_samples_required: int = 3,
        min_time_slice: float = 0,
        hard_stop: bool = True,
    ):
        super().__init__(metric, mode)
        if grace_period < 0:
            raise ValueError(f"grace_period={grace_period!r} must be >= 0")
        if min_samples_required < 1:
            raise ValueError(f"min_samples_required={min_samples_required!r} must be >= 1")
        if min_time_slice < 0:
            raise ValueError(f"min_time_slice={min_time_slice!r} must be >= 0")
        self._time_attr = time_attr
        self._grace_period = grace_period
        self._min_samples_required = min_samples_required
        self._min_time_slice = min_time_slice
        self._hard_stop = hard_stop
        self._results: dict[str, list] = {}  # trial_id -> its results, oldest first
        self.would_stop: set[str] = set()  # trial ids the rule decided to stop

    def on_trial_result(self, trial, result: dict) -> str:
        self._check_result(result, self._time_attr)
        if trial.trial_id in self.would_stop:
            return STOP if self._hard_stop else CONTINUE
        t = result[self._time_attr]
        self._score(result)  # a clear error now if the metric is not a number
        self._results.setdefault(trial.trial_id, []).append(result)
        if t < self._grace_period:
            return CONTINUE
        others = [
            tid for tid, rs in self._results.items() if tid != trial.trial_id and rs[-1][self._time_attr] >= t
        ]
        if len(others) < self._min_samples_required:
            return CONTINUE
        means = [m for m in (self._running_mean(tid, t) for tid in others) if m is not None]
        if len(means) < self._min_samples_required:
            return CONTINUE
        median = float(np.median(means))
        best = max(self._score(r) for r in self._results[trial.trial_id])
        if best < median and t > self._grace_period:
            self.would_stop.add(trial.trial_id)
            return STOP if self._hard_stop else CONTINUE
        return CONTINUE

    def on_trial_complete(self, trial, result: dict) -> None:
        # For a trial this rule stopped, the driver may pass a report made after the STOP:
        # only a trial that ended by itself adds its final result.
        if trial.trial_id not in self.would_stop and self._usable(result, self._time_attr):
            rs = self._results.setdefault(trial.trial_id, [])
            if not rs or rs[-1] != result:  # the driver may pass the last report again
                rs.append(result)

    def _running_mean(self, trial_id: str, t: float) -> float | None:
        scoped = [
            self._score(r) for r in self._results[trial_id] if self._grace_period <= r[self._time_attr] <= t
        ]
        return float(np.mean(scoped)) if scoped else None

    def debug_string(self) -> str:
        return f"Using MedianStoppingRule: num_stopped={len(self.would_stop)}."
