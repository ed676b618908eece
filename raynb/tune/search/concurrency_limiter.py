"""Limit how many of a searcher's trials run at once (Ray Tune's ``ConcurrencyLimiter``)."""

from __future__ import annotations

from .searcher import Searcher


class ConcurrencyLimiter(Searcher):
    """Wraps ``searcher`` so that at most ``max_concurrent`` of its suggestions are live
    (suggested and not completed). An adaptive searcher then sees more results before
    it suggests again.

    Args:
        searcher (Searcher): the wrapped search algorithm.
        max_concurrent (int): >= 1.

    Raises:
        TypeError: ``searcher`` is not a Searcher.
        ValueError: ``max_concurrent`` < 1.
    """

    def __init__(self, searcher: Searcher, max_concurrent: int):
        if not isinstance(searcher, Searcher):
            raise TypeError(
                f"ConcurrencyLimiter wraps a Searcher (e.g. OptunaSearch), got {type(searcher).__name__}"
            )
        if not isinstance(max_concurrent, int) or isinstance(max_concurrent, bool) or max_concurrent < 1:
            raise ValueError(f"ConcurrencyLimiter(max_concurrent={max_concurrent!r}): give an integer >= 1")
        super().__init__(searcher.metric, searcher.mode)
        self.searcher = searcher
        self.max_concurrent = max_concurrent
        self.live: set[str] = set()

    counts_samples = property(lambda self: self.searcher.counts_samples)
    eager = property(lambda self: False)
    total_samples = property(lambda self: self.searcher.total_samples)

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return ok

    def suggest(self, trial_id: str):
        if len(self.live) >= self.max_concurrent:
            return None
        config = self.searcher.suggest(trial_id)
        if isinstance(config, dict):
            self.live.add(trial_id)
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        self.live.discard(trial_id)
        self.searcher.on_trial_complete(trial_id, result, error)

    def add_evaluated_point(self, config: dict, result: dict | None, error: bool = False) -> None:
        """Passed to the wrapped searcher (``Tuner.restore`` replays finished trials)."""
        add = getattr(self.searcher, "add_evaluated_point", None)
        if add is not None:
            add(config, result, error=error)
