"""Tuner on the real warm cluster: trials as runs, results, errors, concurrency, STOP,
time budget, interrupt and restore, Optuna vs random, bad input."""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import pytest

from raynb import tune
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer
from raynb.tune.schedulers import TrialScheduler
from raynb.tune.search import BasicVariantGenerator

from conftest import wait_idle_workers

# Functions defined here travel by value, as a notebook's do.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

QUIET = RunConfig(verbose=0)


def quadratic(config):
    from raynb import tune

    for step in range(3):
        tune.report({"loss": (config["x"] - 3) ** 2 + 1.0 / (step + 1), "step": step})


def timed(config):
    import time

    from raynb import tune

    t0 = time.time()
    time.sleep(config.get("sleep", 0.05))
    tune.report({"start": t0, "end": time.time(), "score": config["i"]})


def overlap(results) -> int:
    """The most trials whose [start, end] intervals (worker clocks) overlap at one instant."""
    events = sorted([(r.metrics["start"], 1) for r in results] + [(r.metrics["end"], -1) for r in results])
    most = now = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most


def test_function_trainable_results_dirs_state_and_dataframe(warm):
    space = {"x": tune.uniform(0, 6), "model": {"width": tune.grid_search([8, 16])}, "const": "c"}
    tuner = tune.Tuner(quadratic, param_space=space,
                       tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=3,
                                                   search_alg=BasicVariantGenerator(random_state=0)),
                       run_config=RunConfig(name="quad", verbose=1))
    grid = tuner.fit()
    assert len(grid) == 6 and grid.num_terminated == 6 and grid.num_errors == 0 and not grid.errors
    assert not grid.interrupted
    exp = Path(grid.experiment_path)
    assert exp.name == "quad" and exp.parent == Path(os.environ["RAYNB_STORAGE_PATH"])
    for r in grid:
        assert isinstance(r, tune.TrialResult) and r.status == "TERMINATED" and r.error is None
        assert r.metrics["training_iteration"] == 3 and r.metrics["step"] == 2
        assert r.metrics["loss"] == pytest.approx((r.config["x"] - 3) ** 2 + 1 / 3)
        assert list(r.metrics_dataframe["training_iteration"]) == [1, 2, 3]
        d = Path(r.path)
        assert d.parent == exp and d.name.endswith(r.trial_id)
        assert json.loads((d / "params.json").read_text()) == r.config
        assert len((d / "result.json").read_text().splitlines()) == 3
        assert (d / "progress.csv").read_text().splitlines()[0].startswith("loss,step,training_iteration")
    assert sorted(r.config["model"]["width"] for r in grid) == [8, 8, 8, 16, 16, 16]
    best = grid.get_best_result()
    assert best.metrics["loss"] == min(r.metrics["loss"] for r in grid)
    assert grid.get_best_result("loss", "max").metrics["loss"] == max(r.metrics["loss"] for r in grid)
    assert grid.get_best_result(scope="avg").config == best.config  # the same x ranks all steps alike

    df = grid.get_dataframe()
    assert len(df) == 6
    for col in ("trial_id", "status", "config/x", "config/model/width", "config/const", "loss", "step",
                "training_iteration", "time_total_s", "path"):
        assert col in df.columns, col
    assert list(df["trial_id"]) == [r.trial_id for r in grid]
    assert set(df["status"]) == {"TERMINATED"} and set(df["config/const"]) == {"c"}
    assert (df["loss"] == [r.metrics["loss"] for r in grid]).all()
    first = grid.get_dataframe(filter_metric="loss", filter_mode="max")  # best (max) report per trial: step 0
    assert (first["training_iteration"] == 1).all()

    state = json.loads((exp / "experiment_state.json").read_text())
    assert [t["trial_id"] for t in state["trials"]] == [r.trial_id for r in grid]
    assert {t["status"] for t in state["trials"]} == {"TERMINATED"}
    assert (exp / "tuner.pkl").exists()
    assert tuner.get_results().get_best_result().trial_id == best.trial_id


def _ddp_trial(config):
    import torch
    import torch.distributed as dist

    from raynb.train import get_context, report

    t = torch.tensor([config["lr"]])
    dist.all_reduce(t)
    report({"world": get_context().get_world_size(), "lr_sum": t.item(), "base": config["base"],
            "loss": config["lr"]})


def test_torch_trainer_trials_are_ddp_runs_with_merged_config(warm):
    trainer = TorchTrainer(_ddp_trial, train_loop_config={"base": 7, "lr": 0.5},
                           scaling_config=ScalingConfig(num_workers=2))
    grid = tune.Tuner(trainer, param_space={"train_loop_config": {"lr": tune.grid_search([0.1, 0.2, 0.3])}},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"), run_config=QUIET).fit()
    assert len(grid) == 3 and grid.num_terminated == 3
    for r in grid:
        lr = r.config["train_loop_config"]["lr"]
        assert r.metrics["world"] == 2 and r.metrics["base"] == 7
        assert r.metrics["lr_sum"] == pytest.approx(2 * lr)
    assert grid.get_best_result().config == {"train_loop_config": {"lr": 0.1}}
    with pytest.raises(ValueError, match="train_loop_config"):
        tune.Tuner(trainer, param_space={"lr": tune.uniform(0, 1)})


def _raises_on_two(config):
    from raynb import tune

    if config["i"] == 2:
        raise RuntimeError("trial two is broken")
    tune.report({"score": config["i"]})


def test_a_trial_that_raises_is_error_and_the_others_finish(warm):
    grid = tune.Tuner(_raises_on_two, param_space={"i": tune.grid_search([0, 1, 2, 3, 4])},
                      tune_config=tune.TuneConfig(metric="score", mode="max"), run_config=QUIET).fit()
    status = {r.config["i"]: r.status for r in grid}
    assert status == {0: "TERMINATED", 1: "TERMINATED", 2: "ERROR", 3: "TERMINATED", 4: "TERMINATED"}
    assert grid.num_errors == 1 and grid.num_terminated == 4
    (err,) = grid.errors
    assert "trial two is broken" in str(err) and "RuntimeError" in err.remote_traceback
    df = grid.get_dataframe()
    assert "trial two is broken" in df.loc[df["config/i"] == 2, "error"].item()
    assert grid.get_best_result().config["i"] == 4
    assert (Path(grid[2].path) / "error.txt").exists()


def test_max_concurrent_trials_is_never_exceeded(warm):
    space = {"i": tune.grid_search(list(range(8))), "sleep": 0.15}
    grid = tune.Tuner(timed, param_space=space, tune_config=tune.TuneConfig(max_concurrent_trials=2),
                      run_config=QUIET).fit()
    assert grid.num_terminated == 8
    assert overlap(grid) == 2  # measured on the workers: never 3, and the limit is used
    grid = tune.Tuner(timed, param_space=space, run_config=QUIET).fit()  # default: as many as the workers
    assert 3 <= overlap(grid) <= 4


class StopAtTwo(TrialScheduler):
    """Stops every trial at its second report."""

    def on_trial_result(self, trial, result):
        return self.STOP if result["training_iteration"] >= 2 else self.CONTINUE


def _endless(config):
    import time

    from raynb import tune

    for i in range(500):
        tune.report({"t": time.time(), "i": i})
        time.sleep(0.02)


def test_scheduler_stop_cancels_the_run_and_frees_the_worker_at_once(warm):
    grid = tune.Tuner(_endless, param_space={"k": tune.grid_search([0, 1, 2, 3])},
                      tune_config=tune.TuneConfig(scheduler=StopAtTwo(), max_concurrent_trials=1),
                      run_config=QUIET).fit()
    assert [r.status for r in grid] == ["STOPPED"] * 4
    assert all(len(r._reports) == 2 for r in grid)  # reports after the STOP are not results
    for prev, nxt in zip(grid, grid[1:]):
        gap = nxt.metrics_dataframe["t"].iloc[0] - prev.metrics_dataframe["t"].iloc[-1]
        assert 0 < gap < 1.0, gap  # the next trial starts on the freed worker within 1 s
    wait_idle_workers(warm, 4, timeout=3)


def test_time_budget_stops_everything(warm):
    t0 = time.monotonic()
    grid = tune.Tuner(_endless, param_space={"k": tune.grid_search(list(range(6)))},
                      tune_config=tune.TuneConfig(time_budget_s=1.0), run_config=QUIET).fit()
    took = time.monotonic() - t0
    assert 1.0 <= took < 3.0, took
    status = [r.status for r in grid]
    assert status.count("STOPPED") == 4 and status.count("PENDING") == 2, status
    wait_idle_workers(warm, 4, timeout=3)


def _until_marker(config):
    import os
    import time

    from raynb import tune

    for i in range(config["n"]):
        tune.report({"i": i, "score": config["k"]})
        if os.path.exists(config["marker"]):
            return
        time.sleep(0.05)


def test_interrupt_returns_partial_results_and_restore_resumes(warm, tmp_path):
    marker = str(tmp_path / "go")
    space = {"k": tune.grid_search([0, 1, 2, 3, 4, 5]), "marker": marker,
             "n": tune.sample_from(lambda spec: 1 if spec.config.k < 2 else 400)}
    tuner = tune.Tuner(_until_marker, param_space=space,
                       tune_config=tune.TuneConfig(metric="score", mode="max", max_concurrent_trials=2),
                       run_config=QUIET)
    sent = {}

    def interrupt():
        sent["at"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(1.5, interrupt)
    timer.start()
    try:
        grid = tuner.fit()
    finally:
        timer.cancel()
    returned = time.monotonic() - sent["at"]
    assert returned < 2.0, returned
    assert grid.interrupted
    assert [r.status for r in grid] == ["TERMINATED", "TERMINATED", "PAUSED", "PAUSED", "PENDING", "PENDING"]
    assert grid.num_terminated == 2 and len(grid[2]._reports) > 0
    wait_idle_workers(warm, 4, timeout=2)  # every interrupted trial's worker is free again
    state = json.loads((Path(grid.experiment_path) / "experiment_state.json").read_text())
    assert [t["status"] for t in state["trials"]] == [r.status for r in grid]
    done_before = (Path(grid[0].path) / "result.json").read_text()

    Path(marker).touch()  # the resumed trials now end after one report
    restored = tune.Tuner.restore(grid.experiment_path, _until_marker)
    grid2 = restored.fit()
    assert [r.trial_id for r in grid2] == [r.trial_id for r in grid]  # no trial forgotten or added
    assert [r.status for r in grid2] == ["TERMINATED"] * 6
    assert (Path(grid2[0].path) / "result.json").read_text() == done_before  # finished ones not re-run
    for r in grid2[2:]:
        assert len(r._reports) == 1 and r.metrics["score"] == r.config["k"]  # no checkpoint: started over
    assert grid2.get_best_result().config["k"] == 5
    with pytest.raises(FileNotFoundError, match="experiment_state.json"):
        tune.Tuner.restore(str(tmp_path), _until_marker)


def test_optuna_beats_random_search_on_a_quadratic(warm):
    from raynb.tune.search.optuna import OptunaSearch

    def objective(config):
        from raynb import tune

        tune.report({"loss": (config["x"] - 1.7) ** 2 + (config["y"] + 0.6) ** 2})

    space = {"x": tune.uniform(-10, 10), "y": tune.uniform(-10, 10)}
    wins, bests = [], []
    for seed in (0, 1, 2):
        best = {}
        for name, alg in (("optuna", OptunaSearch(seed=seed)), ("random", BasicVariantGenerator(random_state=seed))):
            grid = tune.Tuner(objective, param_space=space,
                              tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=60,
                                                          search_alg=alg, max_concurrent_trials=1),
                              run_config=QUIET).fit()
            assert len(grid) == 60 and grid.num_terminated == 60
            best[name] = grid.get_best_result().metrics["loss"]
        wins.append(best["optuna"] < best["random"])
        bests.append(best)
    # Sequential trials (one at a time) make both searches deterministic for a seed.
    assert all(wins), bests
    mean = {k: sum(b[k] for b in bests) / len(bests) for k in ("optuna", "random")}
    assert mean["optuna"] < mean["random"] / 5, bests


def _reports_acc(config):
    from raynb import tune

    tune.report({"acc": 0.5, "epoch": 1})


def test_metric_never_reported_names_the_reported_keys(warm):
    tuner = tune.Tuner(_reports_acc, param_space={"i": tune.grid_search([0, 1])},
                       tune_config=tune.TuneConfig(metric="loss", mode="min"), run_config=QUIET)
    with pytest.raises(ValueError, match=r"'loss'.*\['acc', 'epoch'\]"):
        tuner.fit()
    wait_idle_workers(warm, 4, timeout=3)


def test_bad_input_is_refused_before_any_trial(warm):
    from raynb.tune.schedulers import ASHAScheduler

    runs_before = len(warm.status()["runs"])
    with pytest.raises(ValueError, match="mode='min' or mode='max'"):
        tune.TuneConfig(metric="loss", mode="minimize")
    with pytest.raises(ValueError, match="ASHAScheduler needs metric and mode"):
        tune.Tuner(quadratic, param_space={"x": 1}, tune_config=tune.TuneConfig(scheduler=ASHAScheduler()))
    with pytest.raises(ValueError, match="give them in one place"):
        tune.Tuner(quadratic, param_space={"x": 1},
                   tune_config=tune.TuneConfig(metric="loss", mode="min",
                                               scheduler=ASHAScheduler(metric="acc", mode="max")))
    with pytest.raises(ValueError, match="no mode"):
        tune.TuneConfig(metric="loss")
    with pytest.raises(ValueError, match="num_samples"):
        tune.TuneConfig(num_samples=0)
    with pytest.raises(ValueError, match="max_concurrent_trials"):
        tune.TuneConfig(max_concurrent_trials=0)
    with pytest.raises(ValueError, match="key 'opt/lr'"):
        tune.Tuner(quadratic, param_space={"opt": {"lr": tune.loguniform(1.0, 0.1)}})
    with pytest.raises(ValueError, match="key 'act'.*empty"):
        tune.Tuner(quadratic, param_space={"act": tune.choice([])})
    with pytest.raises(TypeError, match="function f\\(config\\)"):
        tune.Tuner(42)
    with pytest.raises(ValueError, match="cluster holds at most"):
        tune.Tuner(TorchTrainer(_ddp_trial, scaling_config=ScalingConfig(num_workers=10_000))).fit()
    with pytest.raises(ValueError, match="needs metric= and mode="):
        from raynb.tune.search.optuna import OptunaSearch

        tune.Tuner(quadratic, param_space={"x": tune.uniform(0, 1)},
                   tune_config=tune.TuneConfig(search_alg=OptunaSearch())).fit()
    assert len(warm.status()["runs"]) == runs_before  # no trial was submitted


def test_overhead_benchmark_quick_prints_json(tmp_path):
    import subprocess

    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(root))
    for k in ("RAYNB_HOME", "RAYNB_STORAGE_PATH", "RAYNB_KEY"):
        env.pop(k, None)
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "tune_overhead.py"), "--quick"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    o = out["overhead"]
    assert o["trials"] == 20 and o["concurrency"] == 2 and o["total_s"] > 0 and o["work_s"] >= 0
    assert o["per_trial_overhead_ms"] == pytest.approx((o["total_s"] - o["work_s"]) / 20 * 1000, abs=0.06)  # inputs rounded to ms
    s = out["stop"]["stop_to_next_start_ms"]
    assert s["n"] == 4 and 0 < s["median"] <= s["p90"] <= s["max"]
    assert not list(tmp_path.glob("raynb-bench-*")), "the benchmark removes its temporary directories"
