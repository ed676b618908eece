"""Stopping conditions for trials and experiments (``ray.tune.stopper``).

``RunConfig(stop=...)`` takes a dict (a trial stops once any named result reaches its value),
a function ``f(trial_id, result) -> bool``, or a :class:`Stopper`. After every report the
Tune driver asks the stopper whether that trial stops (``stopper(trial_id, result)``) and
whether the whole experiment stops (``stopper.stop_all()``: running trials are stopped and
no new one starts); a stopped trial ends TERMINATED, its results ending at the report that
stopped it, as in Ray Tune.
"""

from __future__ import annotations

import datetime
import math
import numbers
import time
from collections import defaultdict, deque
from typing import Any, Callable


class Stopper:
    """Base class of a stopper (``ray.tune.Stopper``): override ``__call__`` and ``stop_all``."""

    def __call__(self, trial_id: str, result: dict) -> bool:
        """Whether trial ``trial_id`` stops after reporting ``result``."""
        raise NotImplementedError

    def stop_all(self) -> bool:
        """Whether the whole experiment stops now."""
        raise NotImplementedError


class NoopStopper(Stopper):
    """Stops nothing."""

    def __call__(self, trial_id, result):
        return False

    def stop_all(self):
        return False


class CombinedStopper(Stopper):
    """Stops when any of ``stoppers`` would (``CombinedStopper(s1, s2, ...)``)."""

    def __init__(self, *stoppers: Stopper):
        self._stoppers = stoppers

    def __call__(self, trial_id, result):
        return any([s(trial_id, result) for s in self._stoppers])  # a list: every stopper counts the report

    def stop_all(self):
        return any([s.stop_all() for s in self._stoppers])


class FunctionStopper(Stopper):
    """A trial stops when ``function(trial_id, result)`` returns True."""

    def __init__(self, function: Callable[[str, dict], bool]):
        self._fn = function

    def __call__(self, trial_id, result):
        return bool(self._fn(trial_id, result))

    def stop_all(self):
        return False

    @classmethod
    def is_valid_function(cls, fn) -> bool:
        return callable(fn) and not isinstance(fn, Stopper)


class MaximumIterationStopper(Stopper):
    """A trial stops after ``max_iter`` reports."""

    def __init__(self, max_iter: int):
        self._max_iter = max_iter
        self._iter: dict = defaultdict(int)

    def __call__(self, trial_id, result):
        self._iter[trial_id] += 1
        return self._iter[trial_id] >= self._max_iter

    def stop_all(self):
        return False


class TrialPlateauStopper(Stopper):
    """A trial stops when the standard deviation of its last ``num_results`` values of
    ``metric`` is below ``std`` (after ``grace_period`` reports; past ``metric_threshold``
    in the direction of ``mode`` when one is given).

    Raises:
        ValueError: ``metric_threshold`` without ``mode`` "min" or "max".
    """

    def __init__(
        self,
        metric: str,
        std: float = 0.01,
        num_results: int = 4,
        grace_period: int = 4,
        metric_threshold: float | None = None,
        mode: str | None = None,
    ):
        if metric_threshold is not None and mode not in ("min", "max"):
            raise ValueError(
                f"TrialPlateauStopper(metric_threshold={metric_threshold!r}) needs mode='min' "
                f"or mode='max', got mode={mode!r}"
            )
        self._metric, self._std, self._num_results = metric, std, num_results
        self._grace_period, self._threshold, self._mode = grace_period, metric_threshold, mode
        self._iter: dict = defaultdict(int)
        self._values: dict = defaultdict(lambda: deque(maxlen=self._num_results))

    def __call__(self, trial_id, result):
        value = result.get(self._metric)
        values = self._values[trial_id]
        values.append(value)
        self._iter[trial_id] += 1
        if self._iter[trial_id] < self._grace_period or len(values) < self._num_results:
            return False
        if self._threshold is not None and value is not None:
            if (self._mode == "min" and value > self._threshold) or (
                self._mode == "max" and value < self._threshold
            ):
                return False
        return _std(values) < self._std

    def stop_all(self):
        return False


class ExperimentPlateauStopper(Stopper):
    """The experiment stops when the best ``top`` values of ``metric`` over all reports have
    a standard deviation of at most ``std`` for ``patience`` more reports.

    Raises:
        ValueError: a bad ``mode``, ``top`` (an int > 1), ``patience`` (an int >= 0) or
            ``std`` (a float > 0).
    """

    def __init__(self, metric: str, std: float = 0.001, top: int = 10, mode: str = "min", patience: int = 0):
        if mode not in ("min", "max"):
            raise ValueError(f"ExperimentPlateauStopper(mode={mode!r}): use 'min' or 'max'")
        if not isinstance(top, int) or top <= 1:
            raise ValueError(f"ExperimentPlateauStopper(top={top!r}): give an integer > 1")
        if not isinstance(patience, int) or patience < 0:
            raise ValueError(f"ExperimentPlateauStopper(patience={patience!r}): give an integer >= 0")
        if not isinstance(std, float) or std <= 0:
            raise ValueError(f"ExperimentPlateauStopper(std={std!r}): give a float > 0")
        self._metric, self._std, self._top, self._mode, self._patience = metric, std, top, mode, patience
        self._iterations = 0
        self._top_values: list = []

    def __call__(self, trial_id, result):
        values = sorted(self._top_values + [result[self._metric]])
        self._top_values = values[: self._top] if self._mode == "min" else values[-self._top :]
        self._iterations = self._iterations + 1 if self.has_plateaued() else 0
        return self.stop_all()

    def has_plateaued(self) -> bool:
        return len(self._top_values) == self._top and _std(self._top_values) <= self._std

    def stop_all(self):
        return self.has_plateaued() and self._iterations >= self._patience


class TimeoutStopper(Stopper):
    """The experiment stops ``timeout`` after the stopper is first asked (seconds, or a
    ``datetime.timedelta``).

    Raises:
        ValueError: ``timeout`` neither a number nor a timedelta.
    """

    def __init__(self, timeout):
        if isinstance(timeout, datetime.timedelta):
            timeout = timeout.total_seconds()
        elif not isinstance(timeout, numbers.Real) or isinstance(timeout, bool):
            raise ValueError(f"TimeoutStopper(timeout={timeout!r}): give seconds or a datetime.timedelta")
        self._timeout_seconds = float(timeout)
        self._started: float | None = None

    def __call__(self, trial_id, result):
        return False

    def stop_all(self):
        now = time.monotonic()
        if self._started is None:
            self._started = now
        return now - self._started >= self._timeout_seconds

    def __getstate__(self):
        return {**self.__dict__, "_started": None}  # a restored experiment starts the clock again


class DictStopper(Stopper):
    """``stop={"training_iteration": 10, "mean_accuracy": 0.98}``: a trial stops once any
    named result is at least its value (as Ray Tune compares them)."""

    def __init__(self, criteria: dict):
        self._criteria = dict(criteria)

    def __call__(self, trial_id, result):
        for key, bound in self._criteria.items():
            value = result.get(key)
            if value is None:
                continue
            if isinstance(value, numbers.Real) and not isinstance(value, bool) and value >= bound:
                return True
            if isinstance(value, bool) and value and bound:  # stop={"done": True}
                return True
        return False

    def stop_all(self):
        return False


def as_stopper(stop: Any) -> Stopper | None:
    """``RunConfig.stop`` as a :class:`Stopper` (None for none).

    Raises:
        TypeError: ``stop`` is neither a dict, a function nor a Stopper; a dict bound that
            is not a number.
    """
    if stop is None or isinstance(stop, Stopper):
        return stop
    if isinstance(stop, dict):
        bad = sorted(k for k, v in stop.items() if not isinstance(v, numbers.Real))
        if bad:
            raise TypeError(
                f"RunConfig(stop={stop!r}): the bounds of {bad} must be numbers (a trial stops "
                "once its result is at least the bound)"
            )
        return DictStopper(stop)
    if callable(stop):
        if hasattr(stop, "stop_all"):
            raise TypeError(
                f"RunConfig(stop=...) got a {type(stop).__name__} with stop_all() that is not a "
                "raynb.tune.stopper.Stopper: subclass Stopper so both checks are made"
            )
        return FunctionStopper(stop)
    raise TypeError(
        f"RunConfig(stop=...) takes a dict of result bounds, a function f(trial_id, result) -> "
        f"bool or a raynb.tune.stopper.Stopper, got {type(stop).__name__}"
    )


def _std(values) -> float:
    nums = [float(v) for v in values if isinstance(v, numbers.Real)]
    if len(nums) != len(values) or not nums:
        return math.inf
    mean = sum(nums) / len(nums)
    return math.sqrt(sum((v - mean) ** 2 for v in nums) / len(nums))


__all__ = [
    "Stopper",
    "CombinedStopper",
    "FunctionStopper",
    "MaximumIterationStopper",
    "NoopStopper",
    "TrialPlateauStopper",
    "ExperimentPlateauStopper",
    "TimeoutStopper",
    "DictStopper",
    "as_stopper",
]
