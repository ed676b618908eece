"""The interface between the Tune driver and a search algorithm (Ray Tune's ``Searcher``).

The driver calls ``set_search_properties`` once before any trial, then ``suggest(trial_id)``
whenever it can create a trial, ``on_trial_result`` for every report and
``on_trial_complete`` once per trial.
"""

from __future__ import annotations

from typing import Any

_MODES = ("min", "max")


def _check_metric_mode(owner: str, metric, mode) -> None:
    """Ray's forms: one metric and mode, or (multi-objective) a list of each, as long."""
    modes = mode if isinstance(mode, (list, tuple)) else [mode]
    if any(m is not None and m not in _MODES for m in modes):
        raise ValueError(f"{owner}(mode={mode!r}): use mode='min' or mode='max' (or a list of them)")
    if isinstance(mode, (list, tuple)) != isinstance(metric, (list, tuple)) and None not in (metric, mode):
        raise ValueError(f"{owner}(metric={metric!r}, mode={mode!r}): give both as lists, or neither")
    if isinstance(mode, (list, tuple)) and isinstance(metric, (list, tuple)) and len(mode) != len(metric):
        raise ValueError(f"{owner}(metric={metric!r}, mode={mode!r}): give one mode per metric")


class Searcher:
    """Base class of search algorithms.

    Args:
        metric (str | None): the metric to optimize; may come later from ``TuneConfig``.
        mode ("min" | "max" | None): whether lower or higher is better.
            Multi-objective searchers (``OptunaSearch``) take a list of metrics and a list
            of modes, one each.

    Raises:
        ValueError: a ``mode`` neither "min" nor "max"; lists of different lengths.
    """

    #: ``suggest`` returns this when the algorithm will not suggest anything any more.
    FINISHED = "FINISHED"
    #: True if the algorithm decides how many trials there are (BasicVariantGenerator:
    #: num_samples x grid); otherwise the driver stops asking after ``num_samples``.
    counts_samples = False
    #: True if suggestions do not depend on results, so the driver may create every
    #: trial up front (they show as PENDING and an interrupted experiment keeps them).
    eager = False

    def __init__(self, metric: str | None = None, mode: str | None = None):
        _check_metric_mode(type(self).__name__, metric, mode)
        self._metric = metric
        self._mode = mode

    @property
    def metric(self) -> str | None:
        return self._metric

    @property
    def mode(self) -> str | None:
        return self._mode

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict | None, **spec: Any
    ) -> bool:
        """Fill in ``metric``/``mode`` from ``TuneConfig`` and take the Tuner's ``param_space``.

        Args:
            config (dict | None): the Tuner's ``param_space``.
            spec: ``num_samples`` (int, -1 for unlimited).

        Returns:
            bool: False if this searcher already has a different metric or mode.
        """
        if (self._metric and metric and metric != self._metric) or (
            self._mode and mode and mode != self._mode
        ):
            return False
        self._metric = self._metric or metric
        self._mode = self._mode or mode
        return True

    def suggest(self, trial_id: str) -> dict | None | str:
        """The config of the new trial ``trial_id``; None for "not now, ask again after a
        trial ends"; :attr:`FINISHED` for "no more trials"."""
        raise NotImplementedError

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """An intermediate report of ``trial_id``."""

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """``trial_id`` ended: ``result`` is its last report; ``error`` when it failed."""

    @property
    def total_samples(self) -> int | None:
        """How many trials this algorithm will create, if it knows (see ``counts_samples``)."""
        return None
