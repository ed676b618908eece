"""Population Based Bandits (Parker-Holder et al. 2020, "Provably Efficient Online
Hyperparameter Optimization with Population-Based Bandits", NeurIPS): Ray Tune's ``PB2``.

PBT's exploit step is kept; its explore step is replaced by a bandit choice. Every report
adds a row (time, the trial's hyperparameters scaled to [0, 1]) -> the change of its score
since its previous report; at an exploit, a Gaussian process (scikit-learn's, with a Matern
kernel and a noise term, fixed) is fitted to the recent rows and the new hyperparameters are the
candidate, among random ones and the donor's, with the highest upper confidence bound at
the current time.
"""

from __future__ import annotations

import math

import numpy as np

from .pbt import PopulationBasedTraining

# The most recent rows the GP is fitted on: the landscape drifts in time.
_MAX_ROWS = 120
_CANDIDATES = 256


def _sklearn_gp():
    try:
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel
    except ImportError:
        raise ImportError(
            'PB2 needs scikit-learn: pip install "raynb[search]" (or pip install scikit-learn)'
        ) from None
    # Fixed kernel hyperparameters on inputs scaled to [0, 1] and normalized targets: the fit
    # is one Cholesky factorization. Fitting them (L-BFGS) took seconds on a loaded machine,
    # on the Tune driver's thread, which then missed the head's messages.
    kernel = ConstantKernel(1.0) * Matern(length_scale=0.3, nu=2.5) + WhiteKernel(0.1)
    return GaussianProcessRegressor(kernel=kernel, normalize_y=True, optimizer=None)


class PB2(PopulationBasedTraining):
    """PBT whose new hyperparameters come from a GP-UCB bandit over ``hyperparam_bounds``.

    Args:
        time_attr (str), metric (str | None), mode ("min" | "max" | None),
        perturbation_interval (float), quantile_fraction (float), custom_explore_fn: as in
            :class:`PopulationBasedTraining`.
        hyperparam_bounds (dict): ``{key: [lower, upper]}`` of continuous hyperparameters
            (integers stay integers when both bounds are ints).
        log_config (bool), require_attrs (bool), synch (bool): Ray's; accepted, not used
            (raynb logs every config change and runs PBT asynchronously).
        seed (int | None): seeds the candidate draws and the exploit choices.

    Raises:
        ValueError: no bounds, or a bound that is not [lower < upper].
    """

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        hyperparam_bounds: dict | None = None,
        quantile_fraction: float = 0.25,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        custom_explore_fn=None,
        seed: int | None = None,
    ):
        from ..search.sample import uniform

        bounds = dict(hyperparam_bounds or {})
        if not bounds:
            raise ValueError("PB2 needs hyperparam_bounds, e.g. {'lr': [1e-4, 1e-1]}")
        for key, b in bounds.items():
            if not (isinstance(b, (list, tuple)) and len(b) == 2 and b[0] < b[1]):
                raise ValueError(
                    f"PB2: hyperparam_bounds[{key!r}] = {b!r}: give [lower, upper] with lower < upper"
                )
        super().__init__(
            time_attr=time_attr,
            metric=metric,
            mode=mode,
            perturbation_interval=perturbation_interval,
            hyperparam_mutations={k: uniform(float(lo), float(hi)) for k, (lo, hi) in bounds.items()},
            quantile_fraction=quantile_fraction,
            resample_probability=0.0,
            custom_explore_fn=custom_explore_fn,
            seed=seed,
        )
        _sklearn_gp()  # imported now, not at the first exploit (seconds, on the driver's thread)
        self._bounds = bounds
        self._rows: list[tuple[float, list[float], float]] = []
        self._previous: dict[str, float] = {}

    def _scaled(self, config: dict) -> list[float]:
        return [(float(config[k]) - lo) / (hi - lo) for k, (lo, hi) in self._bounds.items()]

    def on_trial_result(self, trial, result: dict):
        score = result.get(self._metric)
        if isinstance(score, (int, float)) and not math.isnan(score) and self._time_attr in result:
            score = float(score) if self._mode == "max" else -float(score)
            before = self._previous.get(trial.trial_id)
            if before is not None and all(k in trial.config for k in self._bounds):
                self._rows.append(
                    (float(result[self._time_attr]), self._scaled(trial.config), score - before)
                )
                del self._rows[:-_MAX_ROWS]
            self._previous[trial.trial_id] = score
        return super().on_trial_result(trial, result)

    def _explore_config(self, config: dict, trial) -> dict:
        """The donor's config with the bounded keys chosen by GP-UCB (random while fewer
        than three rows are known)."""
        new = dict(config)
        rng = self._rng
        d = len(self._bounds)
        candidates = np.vstack([rng.uniform(size=(_CANDIDATES, d)), [self._scaled(config)]])
        if len(self._rows) >= 3:
            t_max = max(r[0] for r in self._rows) or 1.0
            X = np.array([[r[0] / t_max, *r[1]] for r in self._rows])
            y = np.array([r[2] for r in self._rows])
            gp = _sklearn_gp().fit(X, y)
            at_now = np.hstack([np.ones((len(candidates), 1)), candidates])
            mean, std = gp.predict(at_now, return_std=True)
            kappa = math.sqrt(2 * math.log(max(len(self._rows), 2) * d + 1))
            pick = candidates[int(np.argmax(mean + kappa * std))]
        else:
            pick = candidates[0]
        for (key, (lo, hi)), u in zip(self._bounds.items(), pick):
            value = lo + float(u) * (hi - lo)
            new[key] = int(round(value)) if isinstance(lo, int) and isinstance(hi, int) else value
        if self._custom_explore_fn is not None:
            new = self._custom_explore_fn(new)
        return new

    def _forget(self, trial) -> None:
        self._previous.pop(trial.trial_id, None)
        super()._forget(trial)

    on_trial_error = _forget
    on_trial_remove = _forget

    def on_trial_complete(self, trial, result: dict) -> None:
        self._forget(trial)
