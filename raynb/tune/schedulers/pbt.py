"""Population Based Training (Jaderberg et al. 2017, arXiv:1711.09846), Ray's semantics."""

from __future__ import annotations

import copy
import math
from typing import Callable

import numpy as np

from .trial_scheduler import CONTINUE, Exploit, TrialScheduler


def _is_domain(d) -> bool:
    # raynb.tune.search.sample.Domain (uniform, choice, sample_from, ...), duck-typed so
    # this module does not depend on the search package's import order.
    return hasattr(d, "sample") or hasattr(d, "func")


def _draw(d, rng: np.random.Generator, config: dict):
    """A fresh value from a mutation spec: a list, a search-space object, or a callable."""
    if isinstance(d, (list, tuple)):
        return d[int(rng.integers(len(d)))]
    if hasattr(d, "func"):  # sample_from(fn): fn(spec) or fn()
        return d.func(config) if getattr(d, "pass_spec", False) else d.func()
    if hasattr(d, "sample"):
        return d.sample(rng)
    return d()


def _fill_config(config: dict, mutations: dict, rng: np.random.Generator) -> None:
    """Sample keys that are in ``mutations`` but missing from ``config`` (as Ray does)."""
    for key, d in mutations.items():
        if isinstance(d, dict):
            _fill_config(config.setdefault(key, {}), d, rng)
        elif key not in config:
            config[key] = _draw(d, rng, config)


def explore(
    config: dict,
    mutations: dict,
    resample_probability: float,
    rng: np.random.Generator,
    perturbation_factors=(1.2, 0.8),
    custom_explore_fn: Callable | None = None,
) -> dict:
    """Return a perturbed copy of ``config`` (PBT's explore step, Ray's rules).

    For each key of ``mutations``: a list (or ``choice``) -> with ``resample_probability``
    (or if the current value is not in it) a random element, else the neighbour one step
    left or right; a search-space object or callable -> with ``resample_probability`` a
    new sample, else the value times a random one of ``perturbation_factors`` (ints stay
    ints; a value that is not a number is resampled); a dict -> the same, one level down.
    Then ``custom_explore_fn(config)``. Differences from Ray: ``choice([...])`` moves to a
    neighbour like a list (Ray would multiply the value by a factor), and non-numbers are
    resampled rather than multiplied.
    """
    new = copy.deepcopy(config)
    for key, d in mutations.items():
        if isinstance(d, dict):
            new[key] = explore(config.get(key, {}), d, resample_probability, rng, perturbation_factors)
            continue
        values = list(d) if isinstance(d, (list, tuple)) else getattr(d, "categories", None)
        if values is not None:
            if rng.random() < resample_probability or config[key] not in values:
                new[key] = values[int(rng.integers(len(values)))]
            else:
                idx = values.index(config[key]) + (1 if rng.random() < 0.5 else -1)
                new[key] = values[min(max(idx, 0), len(values) - 1)]
        elif (
            rng.random() < resample_probability
            or isinstance(config[key], bool)
            or not isinstance(config[key], (int, float, np.number))
        ):
            # Only numbers can be scaled; anything else is resampled.
            new[key] = _draw(d, rng, config)
        else:
            factor = perturbation_factors[int(rng.integers(len(perturbation_factors)))]
            new[key] = config[key] * factor
            if isinstance(config[key], int):
                new[key] = int(new[key])
    if custom_explore_fn is not None:
        new = custom_explore_fn(new)
        if not isinstance(new, dict):
            raise TypeError(f"custom_explore_fn must return the new config dict, got {type(new).__name__}")
    return new


class _State:
    def __init__(self):
        self.last_score = None  # metric_op * metric at the last report
        self.last_time = 0.0  # time_attr at the last report
        self.last_perturbation_time = 0.0


class PopulationBasedTraining(TrialScheduler):
    """PBT: every ``perturbation_interval``, bad trials restart from good trials' checkpoints.

    Jaderberg et al., "Population Based Training of Neural Networks", arXiv:1711.09846
    (truncation selection + perturb/resample explore), as Ray Tune's
    ``PopulationBasedTraining``. When a trial's ``time_attr`` has advanced by at least
    ``perturbation_interval`` since its last perturbation, the live trials that have
    reported are ranked by their latest metric; with ``q = ceil(n * quantile_fraction)``
    (at most n/2), a trial in the bottom ``q`` gets :class:`Exploit` with the config of a
    random trial of the top ``q``, explored by :func:`explore`, and that trial's latest
    checkpoint (``trial.checkpoint``). If the chosen top trial has no checkpoint yet the
    exploit is skipped (Ray does the same) and the trial CONTINUEs. Keys of
    ``hyperparam_mutations`` missing from a new trial's config are sampled in
    ``on_trial_add``.

    The driver restarts an exploited trial from ``Exploit.checkpoint`` with
    ``Exploit.config``. Its next perturbation comes ``perturbation_interval`` after the
    exploit on its own ``time_attr`` count (Ray's restored trial takes the donor's count and
    clock, the same thing when trials advance together); if its count restarts lower, the
    clock restarts there.

    Args:
        time_attr (str): result key measuring progress ("training_iteration", or
            "time_total_s" in seconds).
        metric (str | None): result key to optimise; may come from TuneConfig instead.
        mode (str | None): "min" or "max"; may come from TuneConfig instead.
        perturbation_interval (float): ``time_attr`` between perturbations (> 0).
        hyperparam_mutations (dict): key -> list of values, raynb search-space object
            (``uniform(...)``, ``choice(...)``, ``sample_from(...)``), callable returning a
            value, or a nested dict of those.
        quantile_fraction (float): in [0, 0.5]; the top/bottom fraction of trials.
        resample_probability (float): chance of resampling instead of perturbing.
        perturbation_factors (tuple): multipliers for continuous values (Ray: (1.2, 0.8)).
        custom_explore_fn (callable | None): ``f(config) -> config`` applied after explore.
        seed (int | None): seeds all of PBT's random choices (reproducible runs).

    Raises:
        ValueError: bad ``mode``, ``perturbation_interval <= 0``, ``quantile_fraction``
            outside [0, 0.5], ``resample_probability`` outside [0, 1], neither mutations
            nor ``custom_explore_fn``; and, on a result, a missing metric/mode or a metric not
            among the reported keys.
        TypeError: a mutation that is not a list, dict, search-space object or callable.
    """

    _needs_metric = True

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        hyperparam_mutations: dict | None = None,
        quantile_fraction: float = 0.25,
        resample_probability: float = 0.25,
        perturbation_factors=(1.2, 0.8),
        custom_explore_fn: Callable | None = None,
        seed: int | None = None,
    ):
        super().__init__(metric, mode)
        hyperparam_mutations = hyperparam_mutations or {}
        if not hyperparam_mutations and custom_explore_fn is None:
            raise ValueError(
                "PopulationBasedTraining needs hyperparam_mutations "
                "(e.g. {'lr': tune.loguniform(1e-4, 1e-1)}) or custom_explore_fn"
            )
        self._check_mutations(hyperparam_mutations)
        if not perturbation_interval > 0:
            raise ValueError(f"perturbation_interval={perturbation_interval!r} must be > 0")
        if not 0 <= quantile_fraction <= 0.5:
            raise ValueError(f"quantile_fraction={quantile_fraction!r} must be in [0, 0.5]")
        if not 0 <= resample_probability <= 1:
            raise ValueError(f"resample_probability={resample_probability!r} must be in [0, 1]")
        self._time_attr = time_attr
        self._perturbation_interval = perturbation_interval
        self._mutations = hyperparam_mutations
        self._quantile_fraction = quantile_fraction
        self._resample_probability = resample_probability
        self._perturbation_factors = tuple(perturbation_factors)
        self._custom_explore_fn = custom_explore_fn
        self._rng = np.random.default_rng(seed)
        self._state: dict[str, _State] = {}
        self._trials: dict[str, object] = {}  # live trials by id, in creation order
        self._num_perturbations = 0

    @staticmethod
    def _check_mutations(mutations: dict, prefix: str = "") -> None:
        for key, d in mutations.items():
            if isinstance(d, dict):
                PopulationBasedTraining._check_mutations(d, f"{prefix}{key}/")
            elif isinstance(d, (list, tuple)):
                if not d:
                    raise ValueError(f"hyperparam_mutations[{prefix}{key!r}] is an empty list")
            elif not (_is_domain(d) or callable(d)):
                raise TypeError(
                    f"hyperparam_mutations[{prefix}{key!r}] must be a list, a search-space "
                    f"object (tune.uniform(...), ...), a callable or a dict; got "
                    f"{type(d).__name__}"
                )

    def on_trial_add(self, trial) -> None:
        if trial.trial_id in self._state:
            return
        _fill_config(trial.config, self._mutations, self._rng)
        self._state[trial.trial_id] = _State()
        self._trials[trial.trial_id] = trial

    def _quantiles(self) -> tuple[list, list]:
        """(bottom, top) trial ids among live trials that have reported (Ray's rule)."""
        scored = [
            tid
            for tid, st in self._state.items()
            if st.last_score is not None
            and not (isinstance(st.last_score, float) and math.isnan(st.last_score))
        ]
        scored.sort(key=lambda tid: self._state[tid].last_score)
        if len(scored) <= 1:
            return [], []
        q = int(math.ceil(len(scored) * self._quantile_fraction))
        q = min(q, len(scored) // 2)
        return (scored[:q], scored[-q:]) if q else ([], [])

    def on_trial_result(self, trial, result: dict):
        self._check_result(result, self._time_attr)
        self.on_trial_add(trial)
        st = self._state[trial.trial_id]
        t = result[self._time_attr]
        if t < st.last_perturbation_time:  # restarted with a lower count: the clock restarts
            st.last_perturbation_time = t
        st.last_score = self._score(result)
        st.last_time = t
        if t - st.last_perturbation_time < self._perturbation_interval:
            return CONTINUE
        st.last_perturbation_time = t
        bottom, top = self._quantiles()
        if trial.trial_id not in bottom:
            return CONTINUE
        donor_id = top[int(self._rng.integers(len(top)))]
        donor = self._trials[donor_id]
        if not getattr(donor, "checkpoint", None):
            return CONTINUE  # nothing to copy yet (Ray skips the exploit too)
        new_config = self._explore_config(donor.config, trial)
        donor_state = self._state[donor_id]
        # Its perturbation clock stays at t (Ray copies the donor's clock together with the
        # donor's iteration count; raynb's driver keeps the trial's own count, so copying
        # would re-perturb it at once). Until it reports again it scores as the donor: it
        # now carries the donor's weights.
        st.last_score = donor_state.last_score
        self._num_perturbations += 1
        return Exploit(
            config=new_config,
            checkpoint=donor.checkpoint,
            donor_id=donor_id,
            donor_time=donor_state.last_time,
        )

    def _explore_config(self, config: dict, trial) -> dict:
        """The new config of ``trial`` exploiting a donor's ``config`` (PB2 overrides it)."""
        return explore(
            config,
            self._mutations,
            self._resample_probability,
            self._rng,
            self._perturbation_factors,
            self._custom_explore_fn,
        )

    def _forget(self, trial) -> None:
        self._state.pop(trial.trial_id, None)
        self._trials.pop(trial.trial_id, None)

    def on_trial_complete(self, trial, result: dict) -> None:
        self._forget(trial)

    on_trial_error = _forget
    on_trial_remove = _forget

    def debug_string(self) -> str:
        return (
            f"Using PopulationBasedTraining: num_perturbations={self._num_perturbations}, "
            f"live trials={len(self._state)}"
        )
