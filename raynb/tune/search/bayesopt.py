"""Gaussian-process Bayesian optimization with bayes_opt (Ray Tune's ``BayesOptSearch``).

Ray supports bayesian-optimization 1.4.x (``UtilityFunction``); so does this module. The
first ``random_search_steps`` suggestions are random and their results are held back until
all of them are in (a GP fitted on a few points of a parallel batch would only echo them);
after that each suggestion maximizes the acquisition function over the registered points.
"""

from __future__ import annotations

import json
from collections import defaultdict

from .library_searcher import LibrarySearcher, import_library, unsupported
from .sample import Float
from .searcher import Searcher


def _byo():
    return import_library("bayes_opt", "BayesOptSearch", "bayesian-optimization==1.4.3")


def to_bounds(leaves: dict) -> dict:
    """Flat ``{key: Domain}`` -> ``{key: (lower, upper)}`` (bayes_opt's pbounds).

    Raises:
        ValueError: anything but a plain float range (uniform, quniform: the GP works on
            continuous values), naming the key.
    """
    bounds = {}
    for key, leaf in leaves.items():
        if not isinstance(leaf, Float) or leaf.log:
            raise unsupported("BayesOptSearch", key, leaf)
        bounds[key] = (leaf.lower, leaf.upper)
    return bounds


class BayesOptSearch(LibrarySearcher):
    """Suggest configs with bayes_opt's Gaussian process.

    Args:
        space (dict | None): ``{key: tune.uniform(lo, hi)}`` (or ``(lo, hi)`` tuples, as
            bayes_opt's pbounds); None takes the Tuner's ``param_space``.
        metric (str | None), mode ("min" | "max" | None): the objective.
        points_to_evaluate (list[dict] | None): configs to try first.
        utility_kwargs (dict | None): ``bayes_opt.UtilityFunction`` arguments; default
            ``kind="ucb", kappa=2.576, xi=0.0``.
        random_state (int): the optimizer's seed.
        random_search_steps (int): random suggestions before the GP is used.
        verbose (int): bayes_opt's verbosity.
        patience (int): stop (FINISHED) once one config was suggested more often than this.
        skip_duplicate (bool): a config suggested before is not run again (None: ask later).
        repeat_float_precision (int): decimals compared when looking for repeats.

    Raises:
        ImportError: bayesian-optimization is not installed. ValueError: a non-float
        domain, patience <= 0, a negative precision.
    """

    def __init__(
        self,
        space: dict | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict] | None = None,
        utility_kwargs: dict | None = None,
        random_state: int = 42,
        random_search_steps: int = 10,
        verbose: int = 0,
        patience: int = 5,
        skip_duplicate: bool = True,
        analysis=None,
        repeat_float_precision: int = 5,
    ):
        _byo()
        if patience <= 0:
            raise ValueError(f"BayesOptSearch(patience={patience!r}): give a value > 0")
        if not isinstance(repeat_float_precision, int) or repeat_float_precision < 0:
            raise ValueError(
                f"BayesOptSearch(repeat_float_precision={repeat_float_precision!r}): give an int >= 0"
            )
        if isinstance(space, dict) and all(isinstance(v, tuple) for v in space.values()):
            from .sample import uniform

            space = {k: uniform(lo, hi) for k, (lo, hi) in space.items()}
        super().__init__(space, metric, mode, points_to_evaluate)
        self._utility_kwargs = utility_kwargs or {"kind": "ucb", "kappa": 2.576, "xi": 0.0}
        self._random_state, self._verbose = random_state, verbose
        self._random_steps, self._random_given = random_search_steps, 0
        self._patience, self._skip_duplicate = patience, skip_duplicate
        self._precision = repeat_float_precision
        self._seen: dict[str, int] = defaultdict(int)
        self._held: list[tuple[dict, float]] = []
        self.optimizer = self.utility = None
        self._analysis = analysis

    def _build(self, leaves: dict) -> None:
        byo = _byo()
        self.optimizer = byo.BayesianOptimization(
            f=None, pbounds=to_bounds(leaves), random_state=self._random_state, verbose=self._verbose
        )
        self.utility = byo.UtilityFunction(**self._utility_kwargs)
        if self._analysis is not None:
            self.register_analysis(self._analysis)

    def suggest(self, trial_id: str):
        self._ready()
        if not self._points and len(self._held) < self._random_steps <= self._random_given:
            return None  # the random phase is out: wait for its results
        config = super().suggest(trial_id)
        return config

    def _ask(self):
        params = {k: float(v) for k, v in self.optimizer.suggest(self.utility).items()}
        key = json.dumps({k: round(v, self._precision) for k, v in params.items()}, sort_keys=True)
        self._seen[key] += 1
        if max(self._seen.values()) > self._patience:
            return Searcher.FINISHED  # the GP keeps proposing one point: it has converged
        if self._seen[key] > 1 and self._skip_duplicate:
            return None
        if len(self._held) < self._random_steps:
            self._random_given += 1
        return dict(params), params

    def _point(self, flat: dict):
        return {k: float(v) for k, v in flat.items()}

    def _tell(self, params: dict, loss: float | None) -> None:
        if loss is None:
            return
        if len(self._held) < self._random_steps:
            self._held.append((params, loss))
            if len(self._held) < self._random_steps:
                return
            for p, held_loss in self._held:
                self._register(p, held_loss)
            return
        self._register(params, loss)

    def _register(self, params: dict, loss: float) -> None:
        try:
            self.optimizer.register(params, -loss)  # bayes_opt maximizes
        except KeyError:
            pass  # the same point twice: bayes_opt keeps one target per point

    def register_analysis(self, analysis) -> None:
        """Register the trials of an earlier ``ExperimentAnalysis`` / ``ResultGrid``."""
        self._ready()
        for result in analysis:
            self.add_evaluated_point(result.config, result.metrics, error=result.error is not None)
