"""Tree-structured Parzen Estimators with HyperOpt (Ray Tune's ``HyperOptSearch``).

Each suggestion asks hyperopt's algorithm (``tpe.suggest`` by default: Bergstra et al.
2011, "Algorithms for Hyper-Parameter Optimization", NeurIPS) for one new trial document
in a ``hyperopt.Trials``, evaluates the space's expression at its values (so conditional
``hp.choice`` spaces give nested configs) and, when the trial ends, marks the document done
with its loss: hyperopt's own asynchronous protocol, driven one trial at a time.
"""

from __future__ import annotations

import math

import numpy as np

from .library_searcher import LibrarySearcher, import_library, unsupported
from .sample import Categorical, Domain, Float, Integer, Normal


def _hyperopt():
    return import_library("hyperopt", "HyperOptSearch", "hyperopt")


def _is_native(space) -> bool:
    """True for a space written with hyperopt's ``hp.*`` (it holds pyll expressions)."""
    if not isinstance(space, (dict, list, tuple)):
        return type(space).__module__.startswith("hyperopt")
    values = space.values() if isinstance(space, dict) else space
    return any(_is_native(v) for v in values)


def _float_expr(hp, key: str, leaf: Float):
    if leaf.log:
        lo, hi = math.log(leaf.lower), math.log(leaf.upper)
        return hp.qloguniform(key, lo, hi, leaf.q) if leaf.q else hp.loguniform(key, lo, hi)
    return (
        hp.quniform(key, leaf.lower, leaf.upper, leaf.q)
        if leaf.q
        else hp.uniform(key, leaf.lower, leaf.upper)
    )


def _int_expr(hp, scope, key: str, leaf: Integer):
    if not leaf.log and leaf.q is None:
        return hp.randint(key, leaf.lower, leaf.upper)  # [lower, upper), as tune.randint
    q = leaf.q or 1
    if leaf.log:
        return scope.int(hp.qloguniform(key, math.log(leaf.low), math.log(leaf.high), q))
    return scope.int(hp.quniform(key, leaf.low, leaf.high, q))


def to_hyperopt_space(leaves: dict) -> dict:
    """Flat ``{key: Domain}`` -> flat ``{key: hyperopt expression}``.

    Raises:
        ValueError: a domain hyperopt has no expression for (grid_search, sample_from),
            naming the key.
    """
    hpo = _hyperopt()
    hp, scope = hpo.hp, hpo.pyll.scope
    out = {}
    for key, leaf in leaves.items():
        if isinstance(leaf, Float):
            out[key] = _float_expr(hp, key, leaf)
        elif isinstance(leaf, Integer):
            out[key] = _int_expr(hp, scope, key, leaf)
        elif isinstance(leaf, Normal):
            out[key] = (
                hp.qnormal(key, leaf.mean, leaf.sd, leaf.q) if leaf.q else hp.normal(key, leaf.mean, leaf.sd)
            )
        elif isinstance(leaf, Categorical) and not any(isinstance(c, Domain) for c in leaf.categories):
            out[key] = hp.choice(key, leaf.categories)
        else:
            raise unsupported("HyperOptSearch", key, leaf)
    return out


def _plain(value):
    """numpy scalars from hyperopt as Python numbers (configs stay JSON-friendly)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value.item() if isinstance(value, np.generic) else value


class HyperOptSearch(LibrarySearcher):
    """Suggest configs with HyperOpt (TPE by default).

    Args:
        space (dict | None): a tune search space (uniform, quniform, loguniform,
            qloguniform, randint, qrandint, lograndint, randn, choice of plain values and
            constants) or a hyperopt space written with ``hp.*`` (conditional
            ``hp.choice`` of dicts included); None takes the Tuner's ``param_space``.
        metric (str | None), mode ("min" | "max" | None): the objective (or in TuneConfig).
        points_to_evaluate (list[dict] | None): configs to try first; for a tune space
            ``choice`` keys hold the values themselves, for an ``hp.*`` space the point
            gives hyperopt's values (choice indices), as in Ray.
        n_initial_points (int): random trials before TPE models the results.
        random_state_seed (int | None): seeds hyperopt's random state.
        gamma (float): TPE's quantile that splits good from bad results.

    Raises:
        ImportError: hyperopt is not installed. ValueError: an unsupported domain.
    """

    def __init__(
        self,
        space: dict | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict] | None = None,
        n_initial_points: int = 20,
        random_state_seed: int | None = None,
        gamma: float = 0.25,
    ):
        hpo = _hyperopt()
        self._native = space is not None and _is_native(space)
        super().__init__(space, metric, mode, points_to_evaluate)
        self._algo_kwargs = {"n_startup_jobs": n_initial_points, "gamma": gamma}
        self._rstate = np.random.default_rng(random_state_seed)
        self._trials = hpo.Trials()
        self._domain = None

    def _set_space(self, space) -> None:
        if self._native or _is_native(space):
            self._native = True
            self._space = space
            return
        super()._set_space(space)

    def _build(self, leaves: dict) -> None:
        hpo = _hyperopt()
        expr = self._space if self._native else to_hyperopt_space(leaves)
        self._domain = hpo.Domain(lambda cfg: cfg, expr)

    def _evaluate(self, doc) -> dict:
        """The config of trial document ``doc``: the space's expression at its values."""
        hpo = _hyperopt()
        vals = hpo.base.spec_from_misc(doc["misc"])
        ctrl = hpo.base.Ctrl(self._trials, current_trial=doc)
        memo = self._domain.memo_from_config(vals)
        hpo.utils.use_obj_for_literal_in_memo(self._domain.expr, ctrl, hpo.base.Ctrl, memo)
        return _plain(hpo.pyll.rec_eval(self._domain.expr, memo=memo))

    def _ask(self):
        hpo = _hyperopt()
        self._trials.refresh()
        tids = self._trials.new_trial_ids(1)
        seed = int(self._rstate.integers(2**31 - 1))
        docs = hpo.tpe.suggest(tids, self._domain, self._trials, seed, **self._algo_kwargs)
        self._trials.insert_trial_docs(docs)
        self._trials.refresh()
        doc = self._trials._dynamic_trials[-1]
        config = self._evaluate(doc)
        if self._native:
            return doc["tid"], config
        flat = {}
        for key, leaf in self._leaves.items():  # a choice's own value (pyll turns lists into tuples)
            is_choice = isinstance(leaf, Categorical)
            flat[key] = leaf.categories[int(doc["misc"]["vals"][key][0])] if is_choice else config[key]
        return doc["tid"], flat

    def suggest(self, trial_id: str):
        config = super().suggest(trial_id)
        if self._native and isinstance(config, dict) and trial_id in self._live:
            tid = self._live[trial_id]  # the space's expression gives the whole nested config
            return next(self._evaluate(d) for d in self._trials._dynamic_trials if d["tid"] == tid)
        return config

    def _point(self, flat: dict):
        """A given config as a new trial document, hyperopt's values taken from it."""
        hpo = _hyperopt()
        (tid,) = self._trials.new_trial_ids(1)
        vals = {}
        for key, value in flat.items():
            leaf = self._leaves.get(key)
            vals[key] = [leaf.categories.index(value)] if isinstance(leaf, Categorical) else [value]
        labels = set(self._domain.params) | set(vals)
        misc = {"tid": tid, "cmd": self._domain.cmd, "workdir": None}
        misc["vals"] = {k: vals.get(k, []) for k in labels}  # a conditional key left out: inactive
        misc["idxs"] = {k: [tid] if k in vals else [] for k in labels}
        doc = self._trials.new_trial_docs([tid], [None], [{"status": hpo.STATUS_NEW}], [misc])[0]
        doc["state"] = hpo.JOB_STATE_RUNNING
        self._trials.insert_trial_docs([doc])
        self._trials.refresh()
        return tid

    def _tell(self, tid, loss: float | None) -> None:
        hpo = _hyperopt()
        for doc in self._trials._dynamic_trials:
            if doc["tid"] == tid:
                ok = loss is not None
                doc["result"] = {"loss": loss, "status": hpo.STATUS_OK if ok else hpo.STATUS_FAIL}
                doc["state"] = hpo.JOB_STATE_DONE if ok else hpo.JOB_STATE_ERROR
        self._trials.refresh()
