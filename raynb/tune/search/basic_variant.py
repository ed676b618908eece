"""Grid and random search: Ray Tune's default search algorithm."""

from __future__ import annotations

import copy
from typing import Iterator

from .searcher import Searcher
from .variant_generator import count_grid, deep_update, grid_variants, make_rng, resolve, validate_space


class BasicVariantGenerator(Searcher):
    """Random sampling of every Domain, crossed with every ``grid_search`` (as Ray Tune's
    ``BasicVariantGenerator``).

    The experiment has ``num_samples x (grid size)`` trials: each of the ``num_samples``
    repetitions runs the whole grid, with fresh random values for the other keys. The
    points in ``points_to_evaluate`` come first, each taking the place of one repetition;
    keys a point leaves out are sampled (and gridded) as usual.

    Args:
        points_to_evaluate (list[dict] | None): configs (possibly partial, nested like the
            space) to run first.
        random_state (int | numpy.random.Generator | numpy.random.RandomState | None): seed
            for reproducible sampling; None draws from numpy's global random state.
        max_concurrent (int): accepted for Ray compatibility; 0 means no limit (use
            ``TuneConfig(max_concurrent_trials=...)``).

    Raises:
        TypeError: ``points_to_evaluate`` is not a list of dicts.
    """

    counts_samples = True

    def __init__(
        self, points_to_evaluate: list[dict] | None = None, random_state=None, max_concurrent: int = 0
    ):
        super().__init__()
        points = list(points_to_evaluate or [])
        for i, p in enumerate(points):
            if not isinstance(p, dict):
                raise TypeError(
                    f"points_to_evaluate[{i}] must be a dict of hyperparameters, got {type(p).__name__}"
                )
        self._points = copy.deepcopy(points)
        self._rng = make_rng(random_state)
        self._space: dict = {}
        self._num_samples = 1
        self._iter: Iterator[dict] | None = None
        self.max_concurrent = max_concurrent

    @property
    def eager(self) -> bool:
        return self._num_samples >= 0

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        super().set_search_properties(metric, mode, config)
        validate_space(config)
        self._space = config or {}
        self._num_samples = int(spec.get("num_samples", 1))
        self._iter = None
        return True

    @property
    def total_samples(self) -> int | None:
        if self._num_samples < 0:
            return None
        points = self._points[: self._num_samples]
        n = sum(count_grid(deep_update(self._space, p)) for p in points)
        return n + max(0, self._num_samples - len(points)) * count_grid(self._space)

    def _generate(self) -> Iterator[dict]:
        i = 0
        while self._num_samples < 0 or i < self._num_samples:
            space = deep_update(self._space, self._points[i]) if i < len(self._points) else self._space
            for variant in grid_variants(space):
                yield resolve(variant, self._rng)
            i += 1

    def suggest(self, trial_id: str):
        if self._iter is None:
            self._iter = self._generate()
        return next(self._iter, Searcher.FINISHED)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_iter"] = None  # a generator cannot be pickled; restore creates every trial up front
        return state
