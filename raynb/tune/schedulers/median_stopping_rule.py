"""Median stopping rule (Golovin et al. 2017, Google Vizier), Ray's semantics."""

from __future__ import annotations

from array import array

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
        self._history: dict[str, _History] = {}  # trial_id -> its (time, score) pairs
        self.would_stop: set[str] = set()  # trial ids the rule decided to stop

    def on_trial_result(self, trial, result: dict) -> str:
        self._check_result(result, self._time_attr)
        if trial.trial_id in self.would_stop:
            return STOP if self._hard_stop else CONTINUE
        t = result[self._time_attr]
        score = self._score(result)  # a clear error now if the metric is not a number
        mine = self._history.setdefault(trial.trial_id, _History())
        mine.add(t, score, result)
        if t < self._grace_period:
            return CONTINUE
        others = [h for tid, h in self._history.items() if tid != trial.trial_id and h.last_time >= t]
        if len(others) < self._min_samples_required:
            return CONTINUE
        means = [m for m in (h.running_mean(self._grace_period, t) for h in others) if m is not None]
        if len(means) < self._min_samples_required:
            return CONTINUE
        median = float(np.median(means))
        if mine.best < median and t > self._grace_period:
            self.would_stop.add(trial.trial_id)
            return STOP if self._hard_stop else CONTINUE
        return CONTINUE

    def on_trial_complete(self, trial, result: dict) -> None:
        # For a trial this rule stopped, the driver may pass a report made after the STOP:
        # only a trial that ended by itself adds its final result.
        history = self._history.get(trial.trial_id)
        if trial.trial_id not in self.would_stop and self._usable(result, self._time_attr):
            if history is None:
                history = self._history[trial.trial_id] = _History()
            if history.last_result is None or history.last_result != result:
                # (the driver may pass the last report again)
                history.add(result[self._time_attr], self._score(result), result)
        if history is not None:
            history.last_result = None  # a finished trial reports no more

    def on_trial_error(self, trial) -> None:
        history = self._history.get(trial.trial_id)
        if history is not None:
            history.last_result = None

    on_trial_remove = on_trial_error

    def debug_string(self) -> str:
        return f"Using MedianStoppingRule: num_stopped={len(self.would_stop)}."


class _History:
    """One trial's reports as the rule needs them: ``time_attr`` and score (``metric_op *
    metric``) as two float arrays (16 bytes a report), its best score so far, and its last
    result only while it runs (to tell a repeated final result from a new one)."""

    __slots__ = ("times", "scores", "best", "last_result")

    def __init__(self):
        self.times = array("d")
        self.scores = array("d")
        self.best: float | None = None
        self.last_result: dict | None = None

    def add(self, time: float, score: float, result: dict) -> None:
        self.times.append(time)
        self.scores.append(score)
        # As max() over all scores would pick (NaN included): the first, then any greater.
        if self.best is None or score > self.best:
            self.best = score
        self.last_result = result

    @property
    def last_time(self) -> float:
        return self.times[-1]

    def running_mean(self, grace_period: float, t: float) -> float | None:
        """Mean score over reports with ``grace_period <= time <= t``; None if there are none."""
        times = np.frombuffer(self.times, dtype=np.float64)
        scoped = np.frombuffer(self.scores, dtype=np.float64)[(grace_period <= times) & (times <= t)]
        return float(np.mean(scoped)) if scoped.size else None
