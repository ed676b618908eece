"""Limit how many of a searcher's trials run at once (Ray Tune's ``ConcurrencyLimiter``)."""

from __future__ import annotations

from .searcher import Searcher
from .wrapping import WrappingSearcher


class ConcurrencyLimiter(WrappingSearcher):
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
        super().__init__(searcher, example="OptunaSearch")
        if not isinstance(max_concurrent, int) or isinstance(max_concurrent, bool) or max_concurrent < 1:
            raise ValueError(f"ConcurrencyLimiter(max_concurrent={max_concurrent!r}): give an integer >= 1")
        self.max_concurrent = max_concurrent
        self.live: set[str] = set()

    eager = property(lambda self: False)

    def suggest(self, trial_id: str):
        if len(self.live) >= self.max_concurrent:
            return None
        config = self.searcher.suggest(trial_id)
        if isinstance(config, dict):
            self.live.add(trial_id)
        return config

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        self.live.discard(trial_id)
        self.searcher.on_trial_complete(trial_id, result, error)
