"""A searcher that wraps another and passes its calls through (``ConcurrencyLimiter``,
``SearchGenerator``): one place for the checks and the pass-through, so a wrapper only
writes what it changes."""

from __future__ import annotations

from .searcher import Searcher


class WrappingSearcher(Searcher):
    """Passes every call to ``self.searcher``; subclasses override what they change.

    Raises:
        TypeError: ``searcher`` is not a Searcher (the message names the wrapper and an
            ``example`` searcher to give it).
    """

    def __init__(self, searcher: Searcher, example: str = "OptunaSearch"):
        if not isinstance(searcher, Searcher):
            raise TypeError(
                f"{type(self).__name__} wraps a Searcher (e.g. {example}), got {type(searcher).__name__}"
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
        """Passed to the wrapped searcher (``Tuner.restore`` replays finished trials)."""
        add = getattr(self.searcher, "add_evaluated_point", None)
        if add is not None:
            add(config, result, error=error)
