"""Run each suggested config several times and tell the searcher the mean (Ray Tune's
``Repeater``): for noisy objectives, e.g. different seeds of one training."""

from __future__ import annotations

import math

from .searcher import Searcher

#: The key a repeated trial finds its index (0 .. repeat-1) under, as in Ray.
TRIAL_INDEX = "__trial_index__"


class Repeater(Searcher):
    """Wraps ``searcher``: each of its configs runs ``repeat`` times; when all of them
    have ended the searcher is told the mean of the metric (NaN-free results only).

    Args:
        searcher (Searcher): the search algorithm whose configs are repeated.
        repeat (int): runs per config (>= 1); set ``num_samples`` to a multiple of it.
        set_index (bool): put ``__trial_index__`` (0 .. repeat-1) into each config.

    Raises:
        TypeError: ``searcher`` is not a Searcher. ValueError: ``repeat`` < 1.
    """

    def __init__(self, searcher: Searcher, repeat: int = 1, set_index: bool = True):
        if not isinstance(searcher, Searcher):
            raise TypeError(f"Repeater wraps a Searcher (e.g. HyperOptSearch), got {type(searcher).__name__}")
        if not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"Repeater(repeat={repeat!r}): give an integer >= 1")
        super().__init__(searcher.metric, searcher.mode)
        self.searcher, self.repeat, self._set_index = searcher, repeat, set_index
        self._group: tuple[str, dict] | None = None  # (group id, config) being handed out
        self._handed = 0
        self._trial_group: dict[str, str] = {}
        self._scores: dict[str, list] = {}

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return ok

    def suggest(self, trial_id: str):
        if self._group is None or self._handed >= self.repeat:
            config = self.searcher.suggest(trial_id)
            if not isinstance(config, dict):
                return config
            self._group, self._handed = (trial_id, config), 0
            self._scores[trial_id] = []
        group_id, config = self._group
        config = dict(config)
        if self._set_index:
            config[TRIAL_INDEX] = self._handed
        self._handed += 1
        self._trial_group[trial_id] = group_id
        return config

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        group_id = self._trial_group.pop(trial_id, None)
        if group_id is None:
            return
        value = (result or {}).get(self._metric)
        ok = not error and isinstance(value, (int, float)) and not math.isnan(value)
        scores = self._scores[group_id]
        scores.append(float(value) if ok else None)
        if len(scores) == self.repeat:
            del self._scores[group_id]
            good = [s for s in scores if s is not None]
            if not good:
                self.searcher.on_trial_complete(group_id, None, error=True)
            else:
                self.searcher.on_trial_complete(
                    group_id, {**(result or {}), self._metric: sum(good) / len(good)}
                )
