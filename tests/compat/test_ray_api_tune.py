"""Ray Tune's names with Ray 2.60's meanings, run on the warm cluster: RunConfig(stop=...)
in each form, the stoppers, FailureConfig(fail_fast=), TuneConfig's every field, the legacy
tune.run / tune.report, with_resources / with_parameters, and Ray's trial statuses."""

from __future__ import annotations

import sys

import cloudpickle
import pytest

from raynb import tune
from raynb.train import FailureConfig, RunConfig, ScalingConfig
from raynb.tune import stopper

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def counting(config):
    """Reports it = 1..30, score = config["x"] * it."""
    import time

    from raynb import tune

    for it in range(1, 31):
        tune.report({"score": config["x"] * it, "flat": 1.0, "it": it})
        time.sleep(0.02)


def _fit(stop=None, xs=(1, 2), **tc):
    rc = RunConfig(verbose=0, stop=stop, **tc.pop("rc", {}))
    return tune.Tuner(
        counting,
        param_space={"x": tune.grid_search(list(xs))},
        tune_config=tune.TuneConfig(**tc),
        run_config=rc,
    ).fit()


def _iters(grid):
    return sorted(r.metrics["training_iteration"] for r in grid)


@pytest.mark.parametrize(
    "stop, expected",
    [
        ({"training_iteration": 4}, [4, 4]),
        ({"score": 10}, [5, 10]),  # x=1 reaches 10 at it 10, x=2 at 5
        (lambda trial_id, result: result["it"] >= 3, [3, 3]),
        (stopper.MaximumIterationStopper(max_iter=6), [6, 6]),
        (stopper.FunctionStopper(lambda trial_id, result: result["score"] >= 8), [4, 8]),
        (
            stopper.CombinedStopper(
                stopper.MaximumIterationStopper(7), stopper.FunctionStopper(lambda t, r: r["score"] >= 8)
            ),
            [4, 7],
        ),
        (stopper.TrialPlateauStopper(metric="flat", std=0.01, num_results=3, grace_period=5), [5, 5]),
    ],
    ids=["dict-iteration", "dict-metric", "callable", "max-iter", "function", "combined", "trial-plateau"],
)
def test_stop_ends_each_trial_at_its_iteration_terminated(cluster, stop, expected):
    grid = _fit(stop)
    assert _iters(grid) == expected
    assert [r.status for r in grid] == ["TERMINATED"] * 2
    assert grid.num_terminated == 2 and not grid.errors


def test_experiment_stoppers_end_every_trial(cluster):
    # Every report of "flat" is 1.0: the top 3 of all trials plateau after 3 reports.
    grid = _fit(
        stopper.ExperimentPlateauStopper(metric="flat", std=0.001, top=3, mode="min"),
        xs=(1, 2, 3, 4),
        max_concurrent_trials=2,
    )
    assert all(r.status in ("TERMINATED", "PENDING") for r in grid)
    assert max(_iters([r for r in grid if r.metrics])) < 30
    grid = _fit(stopper.TimeoutStopper(0.3))  # 30 reports take at least 0.6 s
    assert all(r.status == "TERMINATED" for r in grid) and max(_iters(grid)) < 30


def test_bad_stop_is_a_clear_error():
    with pytest.raises(TypeError, match="stop"):
        RunConfig(stop=3)
    with pytest.raises(TypeError, match="bounds of \\['score'\\]"):
        stopper.as_stopper({"score": "high"})


def failing(config):
    from raynb import tune

    tune.report({"score": 1})
    if config["x"] == 0:
        raise ValueError("trial zero fails")
    import time

    time.sleep(3)
    tune.report({"score": 2})


def test_fail_fast_stops_the_experiment(cluster):
    rc = RunConfig(verbose=0, failure_config=FailureConfig(fail_fast=True))
    grid = tune.Tuner(
        failing,
        param_space={"x": tune.grid_search([0, 1, 2, 3, 4, 5])},
        tune_config=tune.TuneConfig(max_concurrent_trials=2),
        run_config=rc,
    ).fit()
    statuses = [r.status for r in grid]
    assert statuses[0] == "ERROR" and "PENDING" in statuses, statuses
    rc = RunConfig(verbose=0, failure_config=FailureConfig(fail_fast="raise"))
    with pytest.raises(Exception, match="trial zero fails"):
        tune.Tuner(failing, param_space={"x": tune.grid_search([0, 1])}, run_config=rc).fit()
    with pytest.raises(ValueError, match="max_failures=0"):
        FailureConfig(fail_fast=True, max_failures=2)


def test_tune_config_fields(cluster, capfd):
    grid = _fit(
        {"training_iteration": 2},
        reuse_actors=True,
        num_samples=1,
        metric="score",
        mode="max",
        max_concurrent_trials=1,
        time_budget_s=60,
        trial_name_creator=lambda t: f"named_{t.config['x']}",
        trial_dirname_creator=lambda t: f"dir_x{t.config['x']}",
    )
    assert sorted(r.path.rsplit("/", 1)[1] for r in grid) == ["dir_x1", "dir_x2"]
    assert grid.get_best_result().config["x"] == 2
    assert capfd.readouterr().err.count("reuse_actors") <= 1
    _fit({"training_iteration": 1}, reuse_actors=True)
    assert "reuse_actors" not in capfd.readouterr().err  # said once per process
    with pytest.raises(TypeError, match="trial_name_creator"):
        tune.TuneConfig(trial_name_creator="x")


def legacy(config, data=None):
    from raynb import tune

    total = sum(len(x) for x in data["rows"]) if data is not None else 0
    for i in range(3):
        tune.report(score=config["x"] * (i + 1), total=total)  # Ray's older keyword form


BIG = {"rows": [bytes(1000) for _ in range(500)]}  # about 0.5 MB pickled: shared memory


def test_with_parameters_object_arrives_once_through_shared_memory(cluster):
    from raynb.client import bulk
    from raynb.client.submit_and_follow import build_submission
    from raynb.train import ScalingConfig

    fn = tune.with_parameters(legacy, data=BIG)
    key = "wpcheck"
    try:
        sizes, blocks = [], []
        for _ in range(2):  # two trials of one fit: one data key
            spec, payload = build_submission(
                fn, {"x": 1}, ScalingConfig(num_workers=1), RunConfig(), data_key=key
            )
            sizes.append(len(payload))
            blocks.append(spec["shared_data"]["blocks"])
        assert max(sizes) < 50_000, sizes  # the 0.5 MB object is not in the payload
        assert blocks[0] == blocks[1] and len(blocks[0]) == 1  # one block, shared by both trials
    finally:
        bulk.release(key)
    grid = tune.Tuner(fn, param_space={"x": tune.grid_search([1, 2])}, run_config=RunConfig(verbose=0)).fit()
    assert [r.metrics["total"] for r in grid] == [500_000, 500_000]


def test_tune_run_returns_an_experiment_analysis(cluster):
    analysis = tune.run(
        tune.with_parameters(legacy, data=None),
        config={"x": tune.grid_search([1, 3, 2])},
        metric="score",
        mode="max",
        verbose=0,
        stop={"training_iteration": 2},
        resources_per_trial={"cpu": 1},
        progress_reporter=tune.CLIReporter(),
    )
    assert analysis.best_config == {"x": 3}
    assert analysis.get_best_config(metric="score", mode="min") == {"x": 1}
    assert analysis.best_result["score"] == 6 and analysis.best_result["training_iteration"] == 2
    assert len(analysis.trials) == 3 and all(t.status == "TERMINATED" for t in analysis.trials)
    assert sorted(analysis.results_df["score"]) == [2, 4, 6]
    assert len(analysis.dataframe()) == 3
    with pytest.raises(TypeError, match="'keep_checkpoints_num'"):
        tune.run(legacy, keep_checkpoints_num=2)


def test_with_resources_reads_rays_requests():
    fn = tune.with_resources(legacy, {"cpu": 2})
    assert fn._raynb_scaling.num_workers == 1 and not fn._raynb_scaling.use_gpu
    assert tune.with_resources(
        legacy, tune.PlacementGroupFactory([{"CPU": 1, "GPU": 1}])
    )._raynb_scaling.use_gpu
    assert not tune.with_resources(legacy, [{"CPU": 1}, {"CPU": 2}])._raynb_scaling.use_gpu
    assert tune.with_resources(legacy, ScalingConfig(num_workers=2))._raynb_scaling.num_workers == 2
    with pytest.raises(ValueError, match="custom resources"):
        tune.with_resources(legacy, {"cpu": 1, "TPU": 1})


class Counter(tune.Trainable):
    """Ray's class API: state in setup, one result per step, dict checkpoints."""

    def setup(self, config, offset=0):
        self.value, self.offset = 0, offset

    def step(self):
        self.value += self.config["x"]
        return {"value": self.value + self.offset, "done": self.value >= 100 * self.config["x"]}

    def save_checkpoint(self, checkpoint_dir):
        return {"value": self.value}

    def load_checkpoint(self, checkpoint):
        self.value = checkpoint["value"]


def test_class_trainable_steps_stops_and_checkpoints(cluster):
    rc = RunConfig(
        verbose=0,
        stop={"training_iteration": 5},
        checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=2, checkpoint_at_end=True),
    )
    grid = tune.Tuner(
        tune.with_parameters(Counter, offset=1000), param_space={"x": tune.grid_search([1, 3])}, run_config=rc
    ).fit()
    assert [r.metrics["value"] for r in grid] == [1005, 1015]
    assert [r.metrics["training_iteration"] for r in grid] == [5, 5]
    assert all(r.status == "TERMINATED" for r in grid)
    assert all(r.checkpoint is not None and len(r.best_checkpoints) == 3 for r in grid)  # steps 2, 4, 5
    with pytest.raises(ValueError, match="class Trainable"):
        tune.Tuner(counting, run_config=rc)


def test_asha_stopped_trials_are_terminated_everywhere_and_stored_stopped_reads_back(cluster):
    import json
    from pathlib import Path

    from raynb.tune.schedulers import ASHAScheduler

    grid = _fit(
        None,
        xs=(4, 3, 2, 1),
        metric="score",
        mode="max",
        max_concurrent_trials=1,
        scheduler=ASHAScheduler(max_t=8, grace_period=1, reduction_factor=2),
    )
    its = _iters(grid)
    assert its[0] < 8 and its[-1] == 8, its  # some stopped early, the best ran to max_t
    assert [r.status for r in grid] == ["TERMINATED"] * 4
    assert set(grid.get_dataframe()["status"]) == {"TERMINATED"}
    # An experiment stored before raynb took Ray's statuses said STOPPED: read back as TERMINATED.
    state = Path(grid.experiment_path) / "experiment_state.json"
    data = json.loads(state.read_text())
    for t in data["trials"]:
        t["status"] = "STOPPED"
    state.write_text(json.dumps(data))
    restored = tune.Tuner.restore(grid.experiment_path, counting).get_results()
    assert [r.status for r in restored] == ["TERMINATED"] * 4 and restored.num_terminated == 4


def test_trial_table_draws_early_stopped_terminated_trials_as_stopped():
    from raynb.notebook.trial_table.model import TuneProgress

    p = TuneProgress("score", "max", total_workers=2, param_keys=["x"])
    for tid in ("a", "b"):
        p.add_trial(tid, {"x": 1})
        p.add_result(tid, {"training_iteration": 1, "score": 1.0})
    p.set_status("a", "TERMINATED", None, early_stopped=True)
    p.set_status("b", "TERMINATED")
    rows = {r.trial_id: r for r in p.rows()}
    assert rows["a"].early_stopped and not rows["b"].early_stopped
    assert rows["a"].status == rows["b"].status == "TERMINATED"
