"""Ray Tune's ``SearchAlgorithm`` and ``SearchGenerator`` names.

In Ray a ``SearchAlgorithm`` makes trials and a ``SearchGenerator`` adapts a
:class:`Searcher` (which makes configs) to it. raynb's Tune driver takes a Searcher
directly, so ``SearchAlgorithm`` is the Searcher interface under Ray's older name and
``SearchGenerator(searcher)`` passes every call through to the searcher it wraps.
"""

from __future__ import annotations

from .searcher import Searcher


class SearchAlgorithm(Searcher):
    """Base of search algorithms under Ray's name: the :class:`Searcher` interface."""


class SearchGenerator(SearchAlgorithm):
    """Wraps ``searcher`` as Ray's ``SearchGenerator`` does (usable as ``search_alg``).

    Args:
        searcher (Searcher): the search algorithm that makes the configs.

    Raises:
        TypeError: ``searcher`` is not a Searcher.
    """

    def __init__(self, searcher: Searcher):
        if not isinstance(searcher, Searcher):
            raise TypeError(
                f"SearchGenerator wraps a Searcher (e.g. HyperOptSearch), got {type(searcher).__name__}"
            )
        super().__init__(searcher.metric, searcher.mode)
        self.searcher = searcher

    counts_samples = property(lambda self: self.searcher.counts_samples)
    eager = property(lambda self: self.searcher.eager)
    total_samples = property(lambda self: self.searcher.total_samples)

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return ok

    def suggest(self, trial_id: str):
        return self.searcher.suggest(trial_id)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        self.searcher.on_trial_complete(trial_id, result, error)

    def add_evaluated_point(self, config: dict, result: dict | None, error: bool = False) -> None:
        add = getattr(self.searcher, "add_evaluated_point", None)
        if add is not None:
            add(config, result, error=error)

    def is_finished(self) -> bool:
        return False
