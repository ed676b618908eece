"""Searchers over optimization libraries (HyperOptSearch, BayesOptSearch, NevergradSearch,
ZOOptSearch): space translation, the suggest / on_trial_complete cycle, save / restore,
a replayed point, a search beating random on a quadratic, and runs on the shared cluster."""

from __future__ import annotations

import pytest

from raynb import tune
from raynb.train import RunConfig
from raynb.tune.search import ConcurrencyLimiter, Repeater, Searcher
from raynb.tune.search.variant_generator import make_rng

QUIET = RunConfig(verbose=0)
SPACE = {"x": tune.uniform(-10.0, 10.0), "y": tune.uniform(0.0, 1.0), "k": 7}


def _hyperopt(**kw):
    pytest.importorskip("hyperopt")
    from raynb.tune.search.hyperopt import HyperOptSearch

    kw.setdefault("n_initial_points", 5)
    return HyperOptSearch(random_state_seed=0, **kw)


def _bayesopt(**kw):
    pytest.importorskip("bayes_opt")
    from raynb.tune.search.bayesopt import BayesOptSearch

    return BayesOptSearch(random_state=0, random_search_steps=5, **kw)


def _nevergrad(**kw):
    ng = pytest.importorskip("nevergrad")
    from raynb.tune.search.nevergrad import NevergradSearch

    return NevergradSearch(optimizer=ng.optimizers.OnePlusOne, optimizer_kwargs={"budget": 100}, **kw)


def _zoopt(**kw):
    pytest.importorskip("zoopt")
    from raynb.tune.search.zoopt import ZOOptSearch

    if "space" in kw:
        kw["dim_dict"] = kw.pop("space")  # zoopt's name for it
    return ZOOptSearch(budget=60, **kw)


def _bohb(**kw):
    pytest.importorskip("hpbandster")
    from raynb.tune.search.bohb import TuneBOHB

    return TuneBOHB(seed=0, **kw)


def _ax(**kw):
    pytest.importorskip("ax")
    from raynb.tune.search.ax import AxSearch

    return AxSearch(random_seed=0, **kw)


MAKERS = {
    "hyperopt": _hyperopt,
    "bayesopt": _bayesopt,
    "nevergrad": _nevergrad,
    "zoopt": _zoopt,
    "bohb": _bohb,
    "ax": _ax,
}


def loss(c):
    return (c["x"] - 3.5) ** 2 + c["y"]


def run_searcher(s, n: int, start: int = 0) -> list[dict]:
    """Suggest and complete ``n`` trials one at a time; the configs run."""
    configs = []
    for i in range(start, start + n):
        c = s.suggest(f"t{i}")
        if c == Searcher.FINISHED:
            break
        assert isinstance(c, dict), c
        s.on_trial_complete(f"t{i}", {"loss": loss(c)})
        configs.append(c)
    return configs


# Ax fits a BoTorch model for each suggestion after its Sobol points (seconds each): its
# cycle is covered by the save/restore test's six trials.
@pytest.mark.parametrize("name", sorted(set(MAKERS) - {"ax"}))
def test_suggestions_lie_in_the_space_and_points_come_first(name):
    s = MAKERS[name](metric="loss", mode="min", points_to_evaluate=[{"x": 1.25, "y": 0.5}])
    assert s.set_search_properties(None, None, SPACE)
    configs = run_searcher(s, 8)
    assert len(configs) >= 6
    assert configs[0]["x"] == pytest.approx(1.25) and configs[0]["y"] == pytest.approx(0.5)
    assert all(-10 <= c["x"] <= 10 and 0 <= c["y"] <= 1 and c["k"] == 7 for c in configs)
    assert len({round(c["x"], 9) for c in configs}) >= 5


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_save_and_restore_keep_the_history(name, tmp_path):
    s = MAKERS[name](space=SPACE, metric="loss", mode="min")
    run_searcher(s, 6)
    s.save(str(tmp_path / "state.pkl"))
    assert (tmp_path / "state.pkl").stat().st_mode & 0o777 == 0o600
    fresh = MAKERS[name]()
    fresh.restore(str(tmp_path / "state.pkl"))
    assert fresh.metric == "loss" and fresh.mode == "min"
    assert fresh.get_state().keys() == s.get_state().keys()
    c = fresh.suggest("after")
    assert isinstance(c, dict) and -10 <= c["x"] <= 10 and c["k"] == 7


def test_hyperopt_translates_every_kind_of_domain():
    space = {
        "f": tune.quniform(0, 1, 0.25),
        "lr": tune.loguniform(1e-4, 1e-1),
        "n": tune.randint(2, 5),
        "q": tune.qrandint(0, 10, 5),
        "c": tune.choice(["a", [1, 2]]),
        "nested": {"r": tune.randn(0.0, 1.0)},
    }
    s = _hyperopt(space=space, metric="loss", mode="max")
    for i in range(20):
        c = s.suggest(f"t{i}")
        assert c["f"] in (0, 0.25, 0.5, 0.75, 1.0) and 1e-4 <= c["lr"] <= 1e-1
        assert c["n"] in (2, 3, 4) and c["q"] in (0, 5, 10) and c["c"] in ("a", [1, 2])
        assert isinstance(c["nested"]["r"], float)
        s.on_trial_complete(f"t{i}", {"loss": c["lr"]})
    assert len(s._trials.losses()) == 20 and all(v <= 0 for v in s._trials.losses())  # mode=max negated


def test_hyperopt_takes_a_conditional_hyperopt_space():
    hp = pytest.importorskip("hyperopt").hp
    from raynb.tune.search.hyperopt import HyperOptSearch

    space = {
        "act": hp.choice("act", [{"a": "relu", "m": hp.uniform("m", 1, 2)}, {"a": "tanh"}]),
        "w": hp.uniform("w", 0, 20),
        "steps": 3,
    }
    s = HyperOptSearch(
        space, metric="l", mode="min", random_state_seed=1, points_to_evaluate=[{"act": 1, "w": 3.0}]
    )
    first = s.suggest("p")
    assert first == {"act": {"a": "tanh"}, "w": 3.0, "steps": 3}
    seen = set()
    for i in range(12):
        c = s.suggest(f"t{i}")
        seen.add(c["act"]["a"])
        assert ("m" in c["act"]) == (c["act"]["a"] == "relu") and c["steps"] == 3
        s.on_trial_complete(f"t{i}", {"l": c["w"]})
    assert seen == {"relu", "tanh"}


# Nevergrad's OnePlusOne is left out: in 30 evaluations it is not reliably better than
# random on this function (seed-dependent), so such a test could not be trusted.
@pytest.mark.parametrize(("name", "budget"), [("hyperopt", 30), ("bayesopt", 12)])
def test_a_search_beats_random_on_a_quadratic(name, budget):
    rng = make_rng(0)
    random_best = min(
        loss({k: v.sample(rng) if hasattr(v, "sample") else v for k, v in SPACE.items()}) for _ in range(30)
    )
    s = MAKERS[name](space=SPACE, metric="loss", mode="min")
    searched_best = min(loss(c) for c in run_searcher(s, budget))
    assert searched_best < random_best / 2, (searched_best, random_best)


@pytest.mark.parametrize("name", ["hyperopt", "nevergrad", "bayesopt"])
def test_a_replayed_point_reaches_the_library(name):
    s = MAKERS[name](space=SPACE, metric="loss", mode="min")
    s.add_evaluated_point({"x": 3.5, "y": 0.0, "k": 7}, {"loss": 0.0})
    s.add_evaluated_point({"x": 1.0}, {"loss": 1.0})  # not a point of the space (no y): skipped
    if name == "hyperopt":
        assert s._trials.losses() == [0.0]
    elif name == "nevergrad":
        assert s.optimizer.num_tell == 1
    else:
        assert len(s._held) == 1  # the random phase holds it back, as its own trials


def test_a_missing_library_names_the_package(monkeypatch):
    import sys

    from raynb.tune.search.library_searcher import import_library

    monkeypatch.setitem(sys.modules, "hyperopt", None)
    with pytest.raises(ImportError, match=r"pip install hyperopt.*|raynb\[search\]"):
        import_library("hyperopt", "HyperOptSearch", "hyperopt")


def test_bad_input_is_named():
    pytest.importorskip("bayes_opt")
    from raynb.tune.search.bayesopt import BayesOptSearch

    with pytest.raises(ValueError, match="key 'c'"):
        BayesOptSearch(space={"c": tune.choice([1, 2])}, metric="m", mode="min").suggest("t")
    with pytest.raises(ValueError, match="no search space"):
        _hyperopt(metric="m", mode="min").suggest("t")
    with pytest.raises(ValueError, match="metric"):
        _hyperopt(space=SPACE).suggest("t")
    with pytest.raises(ValueError, match="given twice"):
        _hyperopt(space=SPACE).set_search_properties("m", "min", {"z": tune.uniform(0, 1)})


def test_repeater_tells_the_mean_once_per_config():
    s = Repeater(_hyperopt(space=SPACE, metric="loss", mode="min"), repeat=3)
    configs = [s.suggest(f"t{i}") for i in range(3)]
    assert [c.pop("__trial_index__") for c in configs] == [0, 1, 2] and configs[0] == configs[2]
    for i, v in enumerate((1.0, 2.0, 6.0)):
        s.on_trial_complete(f"t{i}", {"loss": v})
    assert s.searcher._trials.losses() == [3.0]


def _quadratic(config):
    from raynb import tune

    tune.report({"loss": (config["x"] - 3.5) ** 2 + config["y"]})


def test_hyperopt_on_the_cluster_with_a_concurrency_limiter(warm):
    search = ConcurrencyLimiter(_hyperopt(n_initial_points=3), max_concurrent=2)
    grid = tune.Tuner(
        _quadratic,
        param_space=SPACE,
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=6, search_alg=search),
        run_config=QUIET,
    ).fit()
    assert grid.num_terminated == 6 and not grid.errors
    assert all(r.metrics["loss"] == pytest.approx(loss(r.config)) for r in grid)
    assert len(search.searcher._trials.losses()) == 6


def test_bohb_learns_from_every_budget():
    s = _bohb(space=SPACE, metric="loss", mode="max", bohb_config={"min_points_in_model": 3})
    c = s.suggest("t0")
    for it in (1, 2, 3):
        s.on_trial_result("t0", {"loss": float(it), "training_iteration": it})
    s.on_trial_complete("t0", {"loss": 3.0, "training_iteration": 3})
    assert sorted(s.bohber.configs) == [1.0, 2.0, 3.0]  # one observation per budget
    assert s.bohber.losses[3.0] == [-3.0]  # mode=max: told as a loss to minimize
    assert c["k"] == 7


def test_hebo_says_why_it_is_not_served():
    import raynb.tune.search.hebo as hebo

    with pytest.raises(ImportError, match="numpy<1.25"):
        getattr(hebo, "HEBOSearch")  # what `from ... import HEBOSearch` runs


def test_create_searcher_by_name():
    s = tune.create_searcher("hyperopt", metric="m", mode="min")
    assert type(s).__name__ == "HyperOptSearch"
    with pytest.raises(ValueError, match="unknown searcher"):
        tune.create_searcher("nope")
