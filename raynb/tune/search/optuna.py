"""Bayesian search with Optuna (Ray Tune's ``OptunaSearch``), told each trial's final result.

The raynb search space is translated to Optuna distributions and every trial is
``study.ask(distributions)`` / ``study.tell(trial, value)`` (Optuna's ask-and-tell
interface), so the sampler (TPE by default: Bergstra et al. 2011, "Algorithms for
Hyper-Parameter Optimization", NeurIPS) sees every finished trial.
"""

from __future__ import annotations

import math
from typing import Any

from .library_searcher import domain_name
from .sample import Categorical, Float, Integer
from .searcher import Searcher
from .variant_generator import flatten, path_str, unflatten, validate_space, walk

_PLAIN = (type(None), bool, int, float, str)


def _import_optuna():
    try:
        import optuna
    except ImportError:
        raise ImportError(
            'OptunaSearch needs the optuna library: pip install "raynb[tune]" (or pip install optuna)'
        ) from None
    return optuna


class OptunaSearch(Searcher):
    """Suggest configs with an Optuna sampler (TPE by default).

    Args:
        space (dict | callable | None): the search space; None takes the Tuner's
            ``param_space``. A define-by-run function ``f(optuna_trial) -> dict | None``
            calls ``optuna_trial.suggest_*`` itself; the dict it returns (constants) joins
            the config.
            Supported: uniform, quniform, loguniform, randint, qrandint, lograndint, choice
            and constants. Not supported (ValueError naming the key): grid_search,
            sample_from, randn, and quantized log ranges (qloguniform, qlograndint).
        metric (str | list[str] | None): the metric to optimize (or set in ``TuneConfig``);
            a list: a multi-objective study (Pareto front), each trial told every value.
        mode ("min" | "max" | list | None): direction (or set in ``TuneConfig``); a list,
            one per metric, with a list of metrics.
        points_to_evaluate (list[dict] | None): configs to try first (enqueued in the study).
        sampler (optuna.samplers.BaseSampler | None): e.g. ``optuna.samplers.RandomSampler()``;
            None uses ``TPESampler(seed=seed)``.
        seed (int | None): seed of the default TPE sampler.

    Raises:
        ValueError: an unsupported domain (naming the key), ``mode`` not min/max, or both
            ``sampler`` and ``seed`` given (seed the sampler you pass instead).
        ImportError: optuna is not installed.
    """

    def __init__(
        self,
        space: dict | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict] | None = None,
        sampler=None,
        seed: int | None = None,
    ):
        if space is not None and not isinstance(space, dict) and not callable(space):
            raise TypeError(
                f"OptunaSearch(space=...) takes a dict search space or a define-by-run function "
                f"f(optuna_trial) -> dict | None, got {type(space).__name__}; "
                "pass metric= and mode= by keyword"
            )
        super().__init__(metric, mode)
        self._define_by_run = space if callable(space) and not isinstance(space, dict) else None
        if sampler is not None and seed is not None:
            raise ValueError(
                "OptunaSearch got both sampler= and seed=: seed the sampler you pass "
                "(e.g. TPESampler(seed=...)), or pass only seed="
            )
        optuna = _import_optuna()
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the trial table shows the results
        self._sampler = sampler if sampler is not None else optuna.samplers.TPESampler(seed=seed)
        self._points = list(points_to_evaluate or [])
        self._space: dict | None = None
        self._dists: dict = {}
        self._constants: dict = {}
        self._index_maps: dict[str, list] = {}
        self._study = None
        self._ot_trials: dict[str, Any] = {}
        if space is not None and self._define_by_run is None:
            self._set_space(space)

    @property
    def _optuna(self):
        return _import_optuna()  # not kept on self: a module cannot be pickled with the searcher

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        if not super().set_search_properties(metric, mode, config):
            return False
        if config and config is not self._space:  # the same space again: a cell re-run
            if self._space is not None or self._define_by_run is not None:
                raise ValueError(
                    "the search space was given twice: to OptunaSearch(space=...) and to "
                    "Tuner(param_space=...); give it to one of them"
                )
            self._set_space(config)
        return True

    def _set_space(self, space: dict) -> None:
        validate_space(space)
        dists, index_maps = {}, {}
        for path, leaf in walk(space):
            key = path_str(path)
            dists[key] = self._distribution(key, leaf, index_maps)
        self._space = space
        self._dists = dists
        self._index_maps = index_maps
        self._constants = {
            k: v for k, v in flatten(space).items() if not any(k == d or k.startswith(d + "/") for d in dists)
        }

    def _distribution(self, key: str, leaf, index_maps: dict):
        d = self._optuna.distributions
        if isinstance(leaf, Float):
            if leaf.log and leaf.q is not None:
                raise ValueError(
                    f"OptunaSearch: key {key!r}: {leaf!r} (quantized and log scale) has no "
                    "Optuna distribution; use loguniform or quniform"
                )
            return d.FloatDistribution(leaf.lower, leaf.upper, log=leaf.log, step=leaf.q)
        if isinstance(leaf, Integer):
            if leaf.log and leaf.q is not None and leaf.q != 1:
                raise ValueError(
                    f"OptunaSearch: key {key!r}: {leaf!r} (quantized and log scale) has no "
                    "Optuna distribution; use lograndint or qrandint"
                )
            return d.IntDistribution(leaf.low, leaf.high, log=leaf.log, step=leaf.q or 1)
        if isinstance(leaf, Categorical):
            if all(isinstance(c, _PLAIN) for c in leaf.categories):
                return d.CategoricalDistribution(leaf.categories)
            index_maps[key] = leaf.categories  # Optuna stores plain values: choose by index
            return d.CategoricalDistribution(list(range(len(leaf.categories))))
        raise ValueError(
            f"OptunaSearch: key {key!r}: {domain_name(leaf)} cannot be translated to an Optuna "
            "distribution; use uniform/loguniform/randint/choice, or the default "
            "BasicVariantGenerator for grids and sample_from"
        )

    def _ensure_study(self):
        if self._study is None:
            if not self._space and self._define_by_run is None:
                raise ValueError(
                    "OptunaSearch has no search space: pass Tuner(param_space=...) or OptunaSearch(space=...)"
                )
            if self._metric is None or self._mode is None:
                raise ValueError(
                    "OptunaSearch needs metric= and mode= ('min' or 'max'), given to "
                    "OptunaSearch or to TuneConfig"
                )
            modes = self._mode if isinstance(self._mode, (list, tuple)) else [self._mode]
            directions = ["minimize" if m == "min" else "maximize" for m in modes]
            self._study = self._optuna.create_study(sampler=self._sampler, directions=directions)
            for point in self._points:
                params = {}
                for k, v in flatten(point).items():
                    params[k] = self._index_maps[k].index(v) if k in self._index_maps else v
                self._study.enqueue_trial(params)
        return self._study

    def suggest(self, trial_id: str):
        study = self._ensure_study()
        if self._define_by_run is not None:
            return self._suggest_define_by_run(trial_id, study)
        ot_trial = study.ask(fixed_distributions=self._dists)
        self._ot_trials[trial_id] = ot_trial
        flat = dict(self._constants)
        for k, v in ot_trial.params.items():
            flat[k] = self._index_maps[k][v] if k in self._index_maps else v
        return unflatten(flat)

    def _suggest_define_by_run(self, trial_id: str, study):
        """Ray's define-by-run space: ``space(optuna_trial)`` calls ``trial.suggest_*`` and
        returns None or a dict of constants added to the config."""
        ot_trial = study.ask()
        constants = self._define_by_run(ot_trial)
        if constants is not None and not isinstance(constants, dict):
            raise TypeError(
                f"OptunaSearch(space={getattr(self._define_by_run, '__name__', 'f')}): a define-by-run "
                f"function returns None or a dict of constants, got {type(constants).__name__}"
            )
        self._ot_trials[trial_id] = ot_trial
        return unflatten({**flatten(constants or {}), **ot_trial.params})

    @property
    def _multi(self) -> bool:
        return isinstance(self._metric, (list, tuple))

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        ot_trial = self._ot_trials.get(trial_id)
        if self._multi or ot_trial is None:
            return  # Optuna keeps intermediate values for single-objective studies only
        value = result.get(self._metric)
        step = result.get("training_iteration")
        if isinstance(value, (int, float)) and isinstance(step, int):
            ot_trial.report(float(value), step)  # intermediate values, for Optuna's own tools

    def _values(self, result: dict | None):
        """The objective value(s) of ``result`` (a list when multi-objective); None if any is
        missing or NaN."""
        metrics = self._metric if self._multi else [self._metric]
        values = [(result or {}).get(m) for m in metrics]
        if not all(isinstance(v, (int, float)) and not math.isnan(v) for v in values):
            return None
        values = [float(v) for v in values]
        return values if self._multi else values[0]

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        ot_trial = self._ot_trials.pop(trial_id, None)
        if ot_trial is None:
            return
        values = None if error else self._values(result)
        if values is None:
            self._study.tell(ot_trial, state=self._optuna.trial.TrialState.FAIL)
        else:
            self._study.tell(ot_trial, values)

    def add_evaluated_point(self, config: dict, result: dict | None, error: bool = False) -> None:
        """Tell the study about a trial run elsewhere (``Tuner.restore`` replays finished trials)."""
        if self._define_by_run is not None:
            return  # its distributions exist only inside the function's calls: nothing to replay
        optuna = self._optuna
        study = self._ensure_study()
        params = {}
        for k, v in flatten(config).items():
            if k in self._dists:
                params[k] = self._index_maps[k].index(v) if k in self._index_maps else v
        if set(params) != set(self._dists):
            return  # not a point of this space
        values = None if error else self._values(result)
        ok = values is not None
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions=self._dists,
                **({"values": values} if self._multi else {"value": values}),
                state=optuna.trial.TrialState.COMPLETE if ok else optuna.trial.TrialState.FAIL,
            )
        )

    @property
    def study(self):
        """The ``optuna.Study`` (created at the first suggestion)."""
        return self._study
