"""Base class of the trial schedulers: the driver asks it what to do after each report.

Ray Tune's ``TrialScheduler`` (docs.ray.io, ``ray.tune.schedulers``) is the reference. raynb's
driver understands three decisions: ``CONTINUE``, ``STOP`` and ``Exploit`` (PBT's "restart this
trial from another trial's checkpoint with a new config"); there is no PAUSE.
"""

from __future__ import annotations

from dataclasses import dataclass

CONTINUE = "CONTINUE"
STOP = "STOP"

_MODES = ("min", "max")


@dataclass
class Exploit:
    """PBT decision: restart the trial from ``checkpoint`` with ``config``.

    Attributes:
        config (dict): the new (explored) config for the trial.
        checkpoint (str | None): directory of the donor trial's latest checkpoint.
        donor_id (str | None): trial_id of the trial whose checkpoint is copied.
        donor_time (float | None): the donor's ``time_attr`` at its checkpoint; the restarted
            trial continues counting from there, as a Ray trainable restored from a
            checkpoint keeps its iteration count.
    """

    config: dict
    checkpoint: str | None
    donor_id: str | None = None
    donor_time: float | None = None


def check_mode(mode: str | None) -> None:
    """Raise ValueError unless ``mode`` is None, "min" or "max"."""
    if mode is not None and mode not in _MODES:
        raise ValueError(f"mode={mode!r} is not valid: pass mode='min' or mode='max'")


class TrialScheduler:
    """Decides, from each trial's reports, whether it continues (Ray Tune's interface).

    Subclasses that need a metric set ``_needs_metric = True``; their ``metric`` and ``mode``
    may come from the constructor or later from ``TuneConfig`` via
    :meth:`set_search_properties`.

    The driver calls, in order: ``set_search_properties``, ``validate`` (before any trial
    starts), ``on_trial_add`` (trial created), ``choose_trial_to_run`` (a worker is free),
    ``on_trial_result`` (each report) -> ``CONTINUE`` | ``STOP`` | :class:`Exploit`, and one of
    ``on_trial_complete`` / ``on_trial_error`` / ``on_trial_remove`` when a trial ends.
    """

    CONTINUE = CONTINUE
    STOP = STOP
    _needs_metric = False

    def __init__(self, metric: str | None = None, mode: str | None = None):
        check_mode(mode)
        self._metric = metric
        self._mode = mode

    @property
    def metric(self) -> str | None:
        return self._metric

    @property
    def mode(self) -> str | None:
        return self._mode

    @property
    def time_attr(self) -> str | None:
        """The result key measuring progress (None for FIFO)."""
        return getattr(self, "_time_attr", None)

    @property
    def _metric_op(self) -> float:
        # Internally every scheduler maximises metric_op * value.
        return 1.0 if self._mode == "max" else -1.0

    def set_search_properties(self, metric: str | None, mode: str | None) -> bool:
        """Fill in ``metric``/``mode`` from TuneConfig where the scheduler has none.

        Returns:
            bool: False if the scheduler already has a metric or mode that differs from the
            one given (the driver should then raise), True otherwise.

        Raises:
            ValueError: ``mode`` is not "min" or "max".
        """
        check_mode(mode)
        if (self._metric is not None and metric is not None and metric != self._metric) or (
            self._mode is not None and mode is not None and mode != self._mode
        ):
            return False
        if self._metric is None:
            self._metric = metric
        if self._mode is None:
            self._mode = mode
        return True

    def validate(self) -> None:
        """Raise ValueError if the scheduler still lacks a metric or mode it needs.

        The driver calls this before starting any trial.
        """
        if not self._needs_metric:
            return
        missing = [n for n, v in (("metric", self._metric), ("mode", self._mode)) if v is None]
        if missing:
            raise ValueError(
                f"{type(self).__name__} needs {' and '.join(missing)}: pass "
                f"metric=... and mode='min'|'max' to the scheduler or to TuneConfig"
            )

    def _check_result(self, result: dict, time_attr: str | None = None) -> None:
        """Raise ValueError if ``result`` lacks the metric (or ``time_attr``)."""
        self.validate()
        for key in (self._metric, time_attr):
            if key is not None and key not in result:
                shown = sorted(map(str, result))
                raise ValueError(
                    f"{type(self).__name__}: the trial reported no {key!r}; the reported "
                    f"keys are {shown}. Report {key!r} with raynb.tune.report(...) or set "
                    f"the scheduler's metric/time_attr to one of these keys"
                )

    def _score(self, result: dict) -> float:
        """``metric_op * result[metric]`` as a float: larger is better.

        Raises:
            ValueError: the reported metric is not a number.
        """
        value = result[self._metric]
        try:
            if isinstance(value, (str, bytes)):
                raise TypeError
            return self._metric_op * float(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"{type(self).__name__}: the trial reported {self._metric}="
                f"{value!r}; the metric must be a number"
            ) from None

    def _usable(self, result: dict | None, time_attr: str | None = None) -> bool:
        """Whether a final result (which may be empty) can be scored, without raising."""
        if not result or self._metric not in result or (time_attr and time_attr not in result):
            return False
        try:
            self._score(result)
        except ValueError:
            return False
        return True

    # --- hooks (no-ops here) ----------------------------------------------------------
    def on_trial_add(self, trial) -> None:
        """A new trial was created (PENDING)."""

    def on_trial_result(self, trial, result: dict):
        """A report arrived from ``trial``; returns CONTINUE, STOP or an Exploit."""
        return CONTINUE

    def on_trial_complete(self, trial, result: dict) -> None:
        """``trial`` ended by itself (or after STOP) with its last ``result``."""

    def on_trial_error(self, trial) -> None:
        """``trial`` raised or lost its workers."""

    def on_trial_remove(self, trial) -> None:
        """``trial`` was removed without completing (e.g. cancelled)."""

    def reached_budget(self, trial, result: dict) -> bool:
        """Whether a STOP at ``result`` ends ``trial`` because it used its whole budget
        (``max_t``) rather than early: the driver marks it TERMINATED, not STOPPED."""
        max_t = getattr(self, "_max_t", None)
        attr = getattr(self, "_time_attr", None)
        value = result.get(attr) if attr else None
        return max_t is not None and isinstance(value, (int, float)) and value >= max_t

    def choose_trial_to_run(self, pending: list):
        """Pick the next trial to start among ``pending`` (FIFO: the first), or None."""
        return pending[0] if pending else None

    def debug_string(self) -> str:
        return f"Using {type(self).__name__}"
