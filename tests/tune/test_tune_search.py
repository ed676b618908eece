"""Search spaces and search algorithms, without a cluster: sampling, grids, sample_from,
BasicVariantGenerator, OptunaSearch's translation, ConcurrencyLimiter, bad spaces."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from raynb import tune
from raynb.tune.search import BasicVariantGenerator, ConcurrencyLimiter, Searcher
from raynb.tune.search.variant_generator import make_rng, resolve, validate_space

N = 3000


def draws(domain, n=N, seed=0):
    rng = make_rng(seed)
    return [domain.sample(rng) for _ in range(n)]


def all_configs(space, num_samples=1, points=None, seed=0):
    gen = BasicVariantGenerator(points_to_evaluate=points, random_state=seed)
    assert gen.set_search_properties(None, None, space, num_samples=num_samples)
    out = []
    while True:
        c = gen.suggest(f"t{len(out)}")
        if c == Searcher.FINISHED:
            return out, gen.total_samples
        out.append(c)


def test_uniform_bounds_and_spread():
    v = draws(tune.uniform(-2.0, 3.0))
    assert all(-2.0 <= x < 3.0 for x in v) and all(type(x) is float for x in v)
    assert abs(np.mean(v) - 0.5) < 0.1
    assert min(v) < -1.9 and max(v) > 2.9


def test_loguniform_is_uniform_in_log_space():
    v = draws(tune.loguniform(1e-4, 1e-1))
    assert all(1e-4 <= x < 1e-1 for x in v)
    logs = np.log10(v)
    # Each decade gets a third of the draws (a linear uniform would put 90% in the last one).
    for lo in (-4, -3, -2):
        frac = np.mean((logs >= lo) & (logs < lo + 1))
        assert abs(frac - 1 / 3) < 0.04, (lo, frac)


def test_quniform_rounds_to_q_inside_bounds():
    v = draws(tune.quniform(0.0, 1.0, 0.1))
    assert set(v) <= {round(0.1 * k, 1) for k in range(11)}  # exactly 0.3, not 0.30000000000000004
    assert 0.0 in v and 1.0 in v  # quantizing makes the upper bound inclusive
    v = draws(tune.quniform(0.05, 0.95, 0.1))  # bounds that are not multiples of q
    assert min(v) >= 0.1 - 1e-12 and max(v) <= 0.9 + 1e-12


def test_qloguniform_multiples_of_q_in_log_space():
    v = draws(tune.qloguniform(1, 1000, 5))
    assert all(x % 5 == 0 and 5 <= x <= 1000 for x in v)
    assert np.mean(np.array(v) < 40) > 0.25  # log scale: many small values (linear: ~4%)


def test_randint_upper_bound_is_exclusive():
    v = draws(tune.randint(3, 8))
    assert set(v) == {3, 4, 5, 6, 7}
    assert all(type(x) is int for x in v)
    for k, c in Counter(v).items():
        assert abs(c / N - 0.2) < 0.04, (k, c)


def test_qrandint_multiples_of_q_upper_inclusive():
    v = draws(tune.qrandint(0, 20, 5))
    assert set(v) == {0, 5, 10, 15, 20}
    v = draws(tune.qrandint(1, 10, 3))
    assert set(v) == {3, 6, 9}


def test_lograndint_log_scale_upper_exclusive():
    v = draws(tune.lograndint(1, 1000))
    assert all(1 <= x < 1000 and type(x) is int for x in v)
    assert 999 not in v or max(v) == 999
    assert abs(np.mean(np.array(v) < 32) - 0.5) < 0.05  # sqrt(1000) ~ 31.6 splits the draws in half
    v = draws(tune.qlograndint(2, 64, 2))
    assert all(x % 2 == 0 and 2 <= x <= 64 for x in v)


def test_randn_mean_and_sd():
    v = draws(tune.randn(5.0, 2.0))
    assert abs(np.mean(v) - 5.0) < 0.15 and abs(np.std(v) - 2.0) < 0.15
    assert all(x % 0.5 == 0 for x in draws(tune.qrandn(0.0, 3.0, 0.5), 200))


def test_choice_keeps_types_and_is_uniform():
    cats = [1, "two", (3, 3), None]
    v = draws(tune.choice(cats))
    assert set(map(repr, v)) == set(map(repr, cats))
    assert (3, 3) in v and isinstance([x for x in v if isinstance(x, tuple)][0], tuple)
    for c in Counter(map(repr, v)).values():
        assert abs(c / N - 0.25) < 0.04


def test_grid_crossed_with_num_samples_as_ray():
    space = {"a": tune.grid_search([1, 2]), "b": tune.grid_search(["x", "y", "z"]), "r": tune.uniform(0, 1)}
    configs, total = all_configs(space, num_samples=2)
    assert total == len(configs) == 12  # 2 samples x 6 grid points
    pairs = [(c["a"], c["b"]) for c in configs]
    grid = [(1, "x"), (1, "y"), (1, "z"), (2, "x"), (2, "y"), (2, "z")]
    assert pairs == grid + grid  # first key outermost, the whole grid once per sample
    assert len({c["r"] for c in configs}) == 12  # random keys are drawn afresh for every point


def test_sample_from_sees_sampled_values_in_ray_and_dict_style():
    space = {
        "a": tune.uniform(1, 2),
        "model": {"width": tune.choice([8, 16])},
        "double_a": tune.sample_from(lambda spec: spec.config.a * 2),
        "width_plus": tune.sample_from(lambda config: config["model"]["width"] + 1),
        "chained": tune.sample_from(lambda spec: spec.config.double_a + spec.config.model.width),
        "constant": tune.sample_from(lambda: 7),
    }
    for c in all_configs(space, num_samples=20)[0]:
        assert c["double_a"] == 2 * c["a"]
        assert c["width_plus"] == c["model"]["width"] + 1
        assert c["chained"] == c["double_a"] + c["model"]["width"]
        assert c["constant"] == 7


def test_sample_from_cycle_is_a_clear_error():
    space = {"a": tune.sample_from(lambda s: s["b"]), "b": tune.sample_from(lambda s: s["a"])}
    with pytest.raises(ValueError, match="cycle"):
        resolve(space, make_rng(0))


def test_nested_dicts_lists_and_constants():
    space = {
        "opt": {"lr": tune.loguniform(1e-3, 1e-1), "name": "adam", "betas": [tune.uniform(0.8, 0.9), 0.999]},
        "layers": tune.grid_search([[16], [32, 32]]),
    }
    configs, _ = all_configs(space, num_samples=1)
    assert [c["layers"] for c in configs] == [[16], [32, 32]]
    for c in configs:
        assert 1e-3 <= c["opt"]["lr"] < 1e-1 and c["opt"]["name"] == "adam"
        assert 0.8 <= c["opt"]["betas"][0] < 0.9 and c["opt"]["betas"][1] == 0.999
    assert space["opt"]["name"] == "adam" and isinstance(space["opt"]["lr"], tune.search.Float)  # not mutated


def test_points_to_evaluate_come_first_and_count_as_samples():
    space = {"x": tune.uniform(0, 1), "y": tune.choice(["a", "b"]), "g": tune.grid_search([1, 2])}
    points = [{"x": 0.25, "y": "b"}, {"x": 0.75}]
    configs, total = all_configs(space, num_samples=3, points=points)
    assert total == len(configs) == 6  # 3 samples (2 of them the points) x 2 grid values
    assert [(c["x"], c["y"], c["g"]) for c in configs[:2]] == [(0.25, "b", 1), (0.25, "b", 2)]
    assert [c["x"] for c in configs[2:4]] == [0.75, 0.75] and {c["y"] for c in configs[2:4]} <= {"a", "b"}
    assert all(c["x"] not in (0.25, 0.75) for c in configs[4:])
    with pytest.raises(TypeError, match=r"points_to_evaluate\[0\]"):
        BasicVariantGenerator(points_to_evaluate=[[0.1]])


def test_random_state_reproducible():
    space = {"x": tune.uniform(0, 1), "n": tune.randint(0, 1000), "c": tune.choice(list("abcdef"))}
    a, _ = all_configs(space, num_samples=10, seed=42)
    b, _ = all_configs(space, num_samples=10, seed=42)
    c, _ = all_configs(space, num_samples=10, seed=43)
    assert a == b and a != c
    gen = BasicVariantGenerator(random_state=np.random.default_rng(42))  # a Generator works too
    gen.set_search_properties(None, None, space, num_samples=10)
    assert [gen.suggest(str(i)) for i in range(10)] == a
    np.random.seed(5)
    d, _ = all_configs(space, num_samples=5, seed=None)
    np.random.seed(5)
    e, _ = all_configs(space, num_samples=5, seed=None)
    assert d == e  # None draws from numpy's global state, so np.random.seed makes it repeatable


@pytest.mark.parametrize(
    "space,key,why",
    [
        ({"lr": tune.uniform(1.0, 1.0)}, "lr", "lower must be < upper"),
        ({"m": {"lr": tune.loguniform(0.1, 0.01)}}, "m/lr", "lower must be < upper"),
        ({"lr": tune.loguniform(0.0, 1.0)}, "lr", "lower > 0"),
        ({"n": tune.randint(5, 5)}, "n", "lower must be < upper"),
        ({"n": tune.qrandint(1, 4, 5)}, "n", "no multiple"),
        ({"act": tune.choice([])}, "act", "empty"),
        ({"g": tune.grid_search([])}, "g", "empty"),
        ({"x": tune.randn(0, -1)}, "x", "sd must be > 0"),
        ({"x": tune.quniform(0, 1, 0)}, "x", "q must be"),
    ],
)
def test_bad_spaces_name_the_key(space, key, why):
    with pytest.raises(ValueError) as e:
        validate_space(space)
    assert f"key {key!r}" in str(e.value) and why in str(e.value)
    with pytest.raises(ValueError, match=f"key {key!r}"):  # the Tuner checks before any trial
        tune.Tuner(lambda config: None, param_space=space)


def test_choice_and_grid_take_lists():
    with pytest.raises(TypeError, match="list of values"):
        tune.choice(3)
    with pytest.raises(TypeError, match="list of values"):
        tune.grid_search("abc")


# --- OptunaSearch -------------------------------------------------------------------------


def test_optuna_translates_the_space_to_distributions():
    import optuna.distributions as distributions

    from raynb.tune.search.optuna import OptunaSearch

    space = {
        "lr": tune.loguniform(1e-4, 1e-1),
        "m": {"width": tune.qrandint(8, 64, 8)},
        "drop": tune.quniform(0.0, 0.5, 0.1),
        "n": tune.randint(1, 5),
        "k": tune.lograndint(1, 100),
        "act": tune.choice(["relu", "tanh"]),
        "shape": tune.choice([(1, 2), (3, 4)]),
        "fixed": 3,
    }
    s = OptunaSearch(metric="loss", mode="min", seed=0)
    assert s.set_search_properties(None, None, space)
    d = s._dists
    assert d["lr"] == distributions.FloatDistribution(1e-4, 1e-1, log=True)
    assert d["m/width"] == distributions.IntDistribution(8, 64, step=8)
    assert d["drop"] == distributions.FloatDistribution(0.0, 0.5, step=0.1)
    assert d["n"] == distributions.IntDistribution(1, 4)  # randint's upper bound is exclusive
    assert d["k"] == distributions.IntDistribution(1, 99, log=True)
    assert d["act"] == distributions.CategoricalDistribution(["relu", "tanh"])
    for i in range(20):
        c = s.suggest(f"t{i}")
        assert c["fixed"] == 3 and c["shape"] in [(1, 2), (3, 4)] and c["m"]["width"] % 8 == 0
        assert 1 <= c["n"] <= 4 and 1e-4 <= c["lr"] <= 1e-1
        s.on_trial_complete(f"t{i}", {"loss": c["lr"]})
    assert len(s.study.trials) == 20 and s.study.best_value == min(t.value for t in s.study.trials)


@pytest.mark.parametrize(
    "leaf,what",
    [
        (tune.grid_search([1, 2]), "grid_search"),
        (tune.sample_from(lambda s: 1), "sample_from"),
        (tune.randn(), "randn"),
        (tune.qloguniform(1, 10, 1), "quantized and log"),
    ],
)
def test_optuna_rejects_what_it_cannot_translate(leaf, what):
    from raynb.tune.search.optuna import OptunaSearch

    with pytest.raises(ValueError, match=f"key 'opt/x'.*{what}|{what}.*key 'opt/x'|key 'opt/x': .*{what}"):
        OptunaSearch(space={"opt": {"x": leaf}}, metric="loss", mode="min")


def test_optuna_points_to_evaluate_first_and_seed_reproducible():
    from raynb.tune.search.optuna import OptunaSearch

    space = {"x": tune.uniform(-5, 5), "c": tune.choice(["a", "b"])}

    def run(seed):
        s = OptunaSearch(metric="y", mode="max", seed=seed, points_to_evaluate=[{"x": 1.5, "c": "b"}])
        s.set_search_properties(None, None, space)
        out = []
        for i in range(12):
            c = s.suggest(str(i))
            out.append(c)
            s.on_trial_complete(str(i), {"y": -((c["x"] - 2) ** 2)})
        return out

    a = run(1)
    assert a[0] == {"x": 1.5, "c": "b"}
    assert a == run(1) and a != run(2)


def test_optuna_bad_arguments():
    import optuna

    from raynb.tune.search.optuna import OptunaSearch

    with pytest.raises(ValueError, match="mode"):
        OptunaSearch(metric="loss", mode="lowest")
    with pytest.raises(ValueError, match="seed the sampler"):
        OptunaSearch(metric="loss", mode="min", sampler=optuna.samplers.RandomSampler(), seed=1)
    s = OptunaSearch(space={"x": tune.uniform(0, 1)}, metric="loss", mode="min")
    with pytest.raises(ValueError, match="given twice"):
        s.set_search_properties(None, None, {"x": tune.uniform(0, 1)})
    assert not s.set_search_properties("acc", "max", None)  # conflicting metric: the Tuner raises


def test_concurrency_limiter_holds_suggestions_until_completion():
    gen = BasicVariantGenerator(random_state=0)
    lim = ConcurrencyLimiter(gen, max_concurrent=2)
    lim.set_search_properties(None, None, {"x": tune.uniform(0, 1)}, num_samples=5)
    a, b = lim.suggest("a"), lim.suggest("b")
    assert isinstance(a, dict) and isinstance(b, dict)
    assert lim.suggest("c") is None
    lim.on_trial_complete("a", {"x": 1})
    assert isinstance(lim.suggest("c"), dict)
    assert lim.suggest("d") is None
    with pytest.raises(ValueError, match="max_concurrent"):
        ConcurrencyLimiter(gen, 0)
    with pytest.raises(TypeError, match="Searcher"):
        ConcurrencyLimiter(object(), 1)


def test_tune_exports_ray_names():
    for name in (
        "uniform",
        "quniform",
        "loguniform",
        "qloguniform",
        "randint",
        "qrandint",
        "lograndint",
        "randn",
        "choice",
        "grid_search",
        "sample_from",
        "Tuner",
        "TuneConfig",
        "ResultGrid",
        "report",
        "get_checkpoint",
        "OptunaSearch",
        "BasicVariantGenerator",
        "ConcurrencyLimiter",
    ):
        assert getattr(tune, name) is not None, name
    from raynb.train import report

    assert tune.report is report
    assert math.isfinite(tune.uniform(0, 1).sample(make_rng(0)))
