"""Ray Tune names Ray 2.60's shipped examples use, with Ray's meanings, on the warm cluster:
ray.tune.result's keys (SHOULD_CHECKPOINT from a step), mock_trainable.MyTrainableClass,
integration.lightgbm's callback, execution/experiment module paths with
PlacementGroupFactory and get_trial_resources, ResourceChangingScheduler with fixed
resources, and OptunaSearch's define-by-run and multi-objective forms."""

from __future__ import annotations

import math
import os
import sys

import cloudpickle
import pytest

from raynb import tune
from raynb.train import CheckpointConfig, RunConfig

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_result_keys_are_rays():
    from raynb.tune import result as tune_result

    assert (tune_result.TRAINING_ITERATION, tune_result.TIME_TOTAL_S, tune_result.DONE) == (
        "training_iteration",
        "time_total_s",
        "done",
    )
    assert tune_result.SHOULD_CHECKPOINT == "should_checkpoint"
    assert tune_result.EPISODE_REWARD_MEAN == "episode_reward_mean" and tune_result.MEAN_LOSS == "mean_loss"


class _CheckpointsOnAsk(tune.Trainable):
    def setup(self, config):
        self.n = 0

    def step(self):
        self.n += 1
        return {"n": self.n, "should_checkpoint": self.n == 2, "done": self.n == 4}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "n"), "w") as f:
            f.write(str(self.n))

    def load_checkpoint(self, checkpoint):
        pass


def test_step_result_should_checkpoint_saves_that_step(cluster):
    grid = tune.Tuner(
        _CheckpointsOnAsk,
        run_config=RunConfig(verbose=0, checkpoint_config=CheckpointConfig(checkpoint_at_end=False)),
    ).fit()
    result = grid[0]
    assert result.error is None
    assert result.checkpoint is not None  # only step 2 asked; no periodic or final checkpoint
    with open(os.path.join(result.checkpoint.path, "n")) as f:
        assert f.read() == "2"
    assert "should_checkpoint" not in result.metrics


def test_my_trainable_class_curve_and_checkpoint(cluster, tmp_path):
    from raynb.tune.utils.mock_trainable import MyTrainableClass

    local = MyTrainableClass({"width": 10, "height": 50})
    assert local.step()["episode_reward_mean"] == pytest.approx(50 * math.tanh(0.1))
    local.save_checkpoint(str(tmp_path))
    again = MyTrainableClass({"width": 10, "height": 50})
    again.load_checkpoint(str(tmp_path))
    assert again.timestep == 1 and again.restored
    grid = tune.Tuner(
        MyTrainableClass,
        param_space={"width": 5, "height": tune.grid_search([10, 20])},
        run_config=RunConfig(verbose=0, stop={"training_iteration": 3}),
        tune_config=tune.TuneConfig(metric="episode_reward_mean", mode="max"),
    ).fit()
    best = grid.get_best_result()
    assert best.config["height"] == 20
    assert best.metrics["episode_reward_mean"] == pytest.approx(20 * math.tanh(3 / 5))


def lgb_trainable(config):
    import lightgbm as lgb
    import numpy as np

    from raynb.tune.integration.lightgbm import TuneReportCheckpointCallback

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4))
    y = (x[:, 0] > 0).astype(int)
    data = lgb.Dataset(x[:200], label=y[:200])
    valid = lgb.Dataset(x[200:], label=y[200:], reference=data)
    cb = TuneReportCheckpointCallback(
        {"err": "eval-binary_error"}, results_postprocessing_fn=lambda m: {**m, "acc": 1 - m["err"]}
    )
    params = {"objective": "binary", "metric": "binary_error", "verbose": -1}
    lgb.train(params, data, num_boost_round=5, valid_sets=[valid], valid_names=["eval"], callbacks=[cb])


def test_lightgbm_tune_callback_reports_each_round_and_checkpoints(cluster):
    pytest.importorskip("lightgbm")
    from raynb.tune.integration.lightgbm import TuneReportCheckpointCallback

    grid = tune.Tuner(lgb_trainable, run_config=RunConfig(verbose=0)).fit()
    result = grid[0]
    assert result.error is None
    assert result.metrics["training_iteration"] == 5
    assert result.metrics["acc"] == pytest.approx(1 - result.metrics["err"])
    booster = TuneReportCheckpointCallback.get_model(result.checkpoint)
    assert booster.current_iteration() == 5


def resources_trainable(config):
    from raynb import tune

    res = tune.get_context().get_trial_resources()
    tune.report({"head_cpus": res.head_cpus, "cpus": res.required_resources["CPU"]})


def test_execution_paths_and_trial_resources(cluster):
    from raynb.tune.execution.placement_groups import PlacementGroupFactory
    from raynb.tune.execution.tune_controller import TuneController  # noqa: F401 - importable
    from raynb.tune.experiment import Trial

    assert Trial is tune.Trial and PlacementGroupFactory is tune.PlacementGroupFactory
    pgf = PlacementGroupFactory([{"CPU": 2, "GPU": 0}, {"CPU": 1}])
    assert pgf.head_cpus == 2 and pgf.required_resources == {"CPU": 3, "GPU": 0}
    assert (
        pgf
        == PlacementGroupFactory([{"CPU": 2, "GPU": 0}, {"CPU": 1}])
        != PlacementGroupFactory([{"CPU": 1}])
    )
    fn = tune.with_resources(resources_trainable, PlacementGroupFactory([{"CPU": 1, "GPU": 0}]))
    grid = tune.Tuner(fn, run_config=RunConfig(verbose=0)).fit()
    assert grid[0].metrics["head_cpus"] == 1 and grid[0].metrics["cpus"] == 1


def climbing(config):
    from raynb import tune

    for it in range(1, 9):
        tune.report({"score": config["x"] * it})


def _asha_iters(scheduler):
    grid = tune.Tuner(
        climbing,
        param_space={"x": tune.grid_search([4, 3, 2, 1])},  # one at a time, each worse: ASHA stops some
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=scheduler, max_concurrent_trials=1),
        run_config=RunConfig(verbose=0),
    ).fit()
    return {r.config["x"]: r.metrics["training_iteration"] for r in grid}


def test_resource_changing_scheduler_runs_base_scheduler_with_fixed_resources(cluster):
    from raynb.tune.schedulers import ASHAScheduler, ResourceChangingScheduler

    def asha():
        return ASHAScheduler(max_t=8, grace_period=1, reduction_factor=2)

    calls = []
    sched = ResourceChangingScheduler(
        base_scheduler=asha(), resources_allocation_function=lambda *a: calls.append(a)
    )
    wrapped = _asha_iters(sched)
    assert wrapped[4] == 8 and min(wrapped.values()) < 8  # ASHA decided: the best ran to max_t
    assert wrapped == _asha_iters(asha())  # the same decisions as the base scheduler alone
    assert calls == []
    with pytest.raises(TypeError, match="base_scheduler"):
        ResourceChangingScheduler(base_scheduler="asha")


def test_resource_changing_scheduler_says_once_that_resources_are_fixed():
    import subprocess

    code = "from raynb.tune.schedulers import ResourceChangingScheduler as R\nR(); R()\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.count("resources_allocation_function is not called") == 1
    assert "pauses the trial at its checkpoint" in out.stderr


def objective(config):
    from raynb import tune

    for it in range(3):
        tune.report(
            {"loss": (config["width"] - 5) ** 2 + config.get("mult", 0), "gain": config["width"], "it": it}
        )


def define_by_run(trial):
    kind = trial.suggest_categorical("kind", ["a", "b"])
    trial.suggest_float("width", 0, 10)
    if kind == "a":
        trial.suggest_float("mult", 1, 2)
    return {"steps": 3}


def test_optuna_define_by_run_space(cluster):
    pytest.importorskip("optuna")
    from raynb.tune.search.optuna import OptunaSearch

    algo = OptunaSearch(space=define_by_run, metric="loss", mode="min", seed=0)
    grid = tune.Tuner(
        objective,
        tune_config=tune.TuneConfig(search_alg=algo, num_samples=6),
        run_config=RunConfig(verbose=0),
    ).fit()
    assert len(grid) == 6 and not grid.errors
    for r in grid:
        assert r.config["steps"] == 3 and 0 <= r.config["width"] <= 10
        assert ("mult" in r.config) == (r.config["kind"] == "a")
    assert len(algo.study.trials) == 6
    with pytest.raises(ValueError, match="given twice"):
        OptunaSearch(space=define_by_run, metric="loss", mode="min").set_search_properties(
            None, None, {"x": tune.uniform(0, 1)}
        )


def test_optuna_define_by_run_bad_return_is_named():
    pytest.importorskip("optuna")
    from raynb.tune.search.optuna import OptunaSearch

    algo = OptunaSearch(space=lambda t: [t.suggest_float("x", 0, 1)], metric="loss", mode="min")
    with pytest.raises(TypeError, match="returns None or a dict"):
        algo.suggest("t1")


def test_optuna_multi_objective(cluster):
    pytest.importorskip("optuna")
    from raynb.tune.search import ConcurrencyLimiter
    from raynb.tune.search.optuna import OptunaSearch

    algo = OptunaSearch(metric=["loss", "gain"], mode=["min", "max"], seed=0)
    grid = tune.Tuner(
        objective,
        param_space={"width": tune.uniform(0, 10)},
        tune_config=tune.TuneConfig(search_alg=ConcurrencyLimiter(algo, max_concurrent=2), num_samples=5),
        run_config=RunConfig(verbose=0),
    ).fit()
    assert len(grid) == 5 and not grid.errors
    study = algo.study
    assert [d.name for d in study.directions] == ["MINIMIZE", "MAXIMIZE"]
    assert all(len(t.values) == 2 for t in study.trials)
    best_gain = grid.get_best_result("gain", "max")
    assert best_gain.metrics["gain"] == max(r.metrics["gain"] for r in grid)
    with pytest.raises(ValueError, match="one mode per metric"):
        OptunaSearch(metric=["loss", "gain"], mode=["min"])
    with pytest.raises(ValueError, match="min"):
        OptunaSearch(metric=["loss", "gain"], mode=["min", "best"])
