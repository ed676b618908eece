"""Tuner on the real warm cluster: trials as runs, results, errors, concurrency, STOP,
time budget, interrupt and restore, Optuna vs random, bad input."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import pytest
from conftest import wait_idle_workers
from support.quick_benchmark import run_benchmark

from raynb import tune
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer
from raynb.tune.schedulers import TrialScheduler
from raynb.tune.search import BasicVariantGenerator

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
    tuner = tune.Tuner(
        quadratic,
        param_space=space,
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", num_samples=3, search_alg=BasicVariantGenerator(random_state=0)
        ),
        run_config=RunConfig(name="quad", verbose=1),
    )
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
    for col in (
        "trial_id",
        "status",
        "config/x",
        "config/model/width",
        "config/const",
        "loss",
        "step",
        "training_iteration",
        "time_total_s",
        "path",
    ):
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
    report(
        {
            "world": get_context().get_world_size(),
            "lr_sum": t.item(),
            "base": config["base"],
            "loss": config["lr"],
        }
    )


def test_torch_trainer_trials_are_ddp_runs_with_merged_config(warm):
    trainer = TorchTrainer(
        _ddp_trial, train_loop_config={"base": 7, "lr": 0.5}, scaling_config=ScalingConfig(num_workers=2)
    )
    grid = tune.Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": tune.grid_search([0.1, 0.2, 0.3])}},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=QUIET,
    ).fit()
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
    grid = tune.Tuner(
        _raises_on_two,
        param_space={"i": tune.grid_search([0, 1, 2, 3, 4])},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=QUIET,
    ).fit()
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
    grid = tune.Tuner(
        timed, param_space=space, tune_config=tune.TuneConfig(max_concurrent_trials=2), run_config=QUIET
    ).fit()
    assert grid.num_terminated == 8
    assert overlap(grid) == 2  # measured on the workers: never 3, and the limit is used
    grid = tune.Tuner(timed, param_space=space, run_config=QUIET).fit()  # default: as many as the workers
    assert 3 <= overlap(grid) <= 4
    from raynb.tune.search import ConcurrencyLimiter
    from raynb.tune.search.optuna import OptunaSearch

    limited = ConcurrencyLimiter(OptunaSearch(seed=0), max_concurrent=2)
    grid = tune.Tuner(
        timed,
        param_space={"i": tune.randint(0, 100), "sleep": 0.15},
        tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=6, search_alg=limited),
        run_config=QUIET,
    ).fit()
    assert grid.num_terminated == 6 and overlap(grid) == 2


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
    grid = tune.Tuner(
        _endless,
        param_space={"k": tune.grid_search([0, 1, 2, 3])},
        tune_config=tune.TuneConfig(scheduler=StopAtTwo(), max_concurrent_trials=1),
        run_config=QUIET,
    ).fit()
    assert [r.status for r in grid] == ["TERMINATED"] * 4  # Ray 2.60's status for a stopped trial
    for r in grid:
        # Its results end at the STOP (its 2nd report); the run itself (it would report 500
        # times) made at most one more report before the cancel reached it.
        assert [m["training_iteration"] for m in r._reports] == [1, 2]
        assert 2 <= len((Path(r.path) / "result.json").read_text().splitlines()) <= 3
    for prev, nxt in zip(grid, grid[1:]):
        gap = nxt.metrics_dataframe["t"].iloc[0] - prev.metrics_dataframe["t"].iloc[-1]
        assert 0 < gap < 1.0, gap  # the next trial starts on the freed worker within 1 s
    wait_idle_workers(warm, 4, timeout=3)


def test_time_budget_stops_everything(warm):
    t0 = time.monotonic()
    grid = tune.Tuner(
        _endless,
        param_space={"k": tune.grid_search(list(range(6)))},
        tune_config=tune.TuneConfig(time_budget_s=1.0),
        run_config=QUIET,
    ).fit()
    took = time.monotonic() - t0
    assert 1.0 <= took < 3.0, took
    status = [r.status for r in grid]
    assert status.count("TERMINATED") == 4 and status.count("PENDING") == 2, status
    wait_idle_workers(warm, 4, timeout=3)


def _interrupt_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


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
    space = {
        "k": tune.grid_search([0, 1, 2, 3, 4, 5]),
        "marker": marker,
        "n": tune.sample_from(lambda spec: 1 if spec.config.k < 2 else 400),
    }
    tuner = tune.Tuner(
        _until_marker,
        param_space=space,
        tune_config=tune.TuneConfig(metric="score", mode="max", max_concurrent_trials=2),
        run_config=QUIET,
    )
    timer = _interrupt_after(1.5)
    t0 = time.monotonic()
    try:
        grid = tuner.fit()
    finally:
        timer.cancel()
    returned = time.monotonic() - t0 - 1.5
    assert returned < 2.0, returned
    assert grid.interrupted
    assert [r.status for r in grid] == ["TERMINATED", "TERMINATED", "PAUSED", "PAUSED", "PENDING", "PENDING"]
    assert grid.num_terminated == 2 and len(grid[2]._reports) > 0
    wait_idle_workers(warm, 4, timeout=2)  # every interrupted trial's worker is free again
    state = json.loads((Path(grid.experiment_path) / "experiment_state.json").read_text())
    assert [t["status"] for t in state["trials"]] == [r.status for r in grid]
    done_before = (Path(grid[0].path) / "result.json").read_text()

    Path(marker).touch()  # the resumed trials now end after one report
    # Another trainable, or the same loop on other ranks per trial: refused, as Ray Tune's restore.
    for other, ran in (
        (_counting_with_checkpoints, "'_counting_with_checkpoints' on 1 worker(s)"),
        (
            TorchTrainer(_until_marker, scaling_config=ScalingConfig(num_workers=2)),
            "'TorchTrainer' on 2 worker(s)",
        ),
    ):
        with pytest.raises(
            ValueError,
            match="the experiment ran '_until_marker' on 1 worker"
            rf"\(s\) per trial, but the trainable given is {re.escape(ran)}",
        ):
            tune.Tuner.restore(grid.experiment_path, other)
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


def test_fit_again_after_an_interrupt_carries_on(warm, tmp_path):
    marker = str(tmp_path / "go")
    tuner = tune.Tuner(
        _until_marker,
        param_space={"k": tune.grid_search([0, 1, 2]), "n": 400, "marker": marker},
        tune_config=tune.TuneConfig(max_concurrent_trials=2),
        run_config=QUIET,
    )
    timer = _interrupt_after(0.8)
    try:
        grid = tuner.fit()
    finally:
        timer.cancel()
    assert grid.interrupted and [r.status for r in grid] == ["PAUSED", "PAUSED", "PENDING"]
    Path(marker).touch()
    grid2 = tuner.fit()
    assert not grid2.interrupted and grid2.experiment_path == grid.experiment_path
    assert [r.status for r in grid2] == ["TERMINATED"] * 3


def test_restore_after_a_dead_kernel_with_optuna_creates_the_remaining_trials(warm, tmp_path):
    from raynb.tune.search.optuna import OptunaSearch

    marker = str(tmp_path / "go")
    space = {"k": tune.uniform(0, 1), "n": 400, "marker": marker}
    tuner = tune.Tuner(
        _until_marker,
        param_space=space,
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            num_samples=5,
            search_alg=OptunaSearch(seed=0),
            max_concurrent_trials=2,
        ),
        run_config=QUIET,
    )
    timer = _interrupt_after(1.0)
    try:
        grid = tuner.fit()
    finally:
        timer.cancel()
    # Optuna suggests as slots free up, so only the two running trials exist yet.
    assert [r.status for r in grid] == ["PAUSED", "PAUSED"]
    state_file = Path(grid.experiment_path) / "experiment_state.json"
    state = json.loads(state_file.read_text())
    state["trials"][0]["status"] = "RUNNING"  # as a kernel killed mid-trial leaves it
    state_file.write_text(json.dumps(state))

    Path(marker).touch()
    grid2 = tune.Tuner.restore(grid.experiment_path, _until_marker).fit()
    assert len(grid2) == 5 and [r.status for r in grid2] == ["TERMINATED"] * 5
    assert [r.trial_id for r in grid2[:2]] == [r.trial_id for r in grid]
    assert len({r.trial_id for r in grid2}) == 5
    assert all(0 <= r.config["k"] < 1 and r.metrics["score"] == r.config["k"] for r in grid2)


def test_restore_of_a_lazy_grid_search_runs_each_point_once(warm, tmp_path):
    from raynb.tune.search import ConcurrencyLimiter

    marker = str(tmp_path / "go")
    space = {"k": tune.grid_search([0, 1, 2, 3, 4, 5]), "n": 400, "marker": marker}
    tuner = tune.Tuner(
        _until_marker,
        param_space=space,
        tune_config=tune.TuneConfig(search_alg=ConcurrencyLimiter(BasicVariantGenerator(), 2)),
        run_config=QUIET,
    )
    timer = _interrupt_after(1.0)
    try:
        grid = tuner.fit()
    finally:
        timer.cancel()
    assert [r.config["k"] for r in grid] == [0, 1]  # created as slots free up
    Path(marker).touch()
    grid2 = tune.Tuner.restore(grid.experiment_path, _until_marker).fit()
    assert sorted(r.config["k"] for r in grid2) == [0, 1, 2, 3, 4, 5]
    assert grid2.num_terminated == 6


def _prints(config):
    from raynb import tune

    print(f"hello from {config['i']}")
    tune.report({"i": config["i"]})


def test_trial_output_is_relayed_with_its_trial_id_and_the_table_printed(warm, capsys):
    grid = tune.Tuner(
        _prints,
        param_space={"i": tune.grid_search([0, 1])},
        tune_config=tune.TuneConfig(metric="i", mode="max"),
        run_config=RunConfig(verbose=1),
    ).fit()
    out = capsys.readouterr().out
    for r in grid:
        assert f"({r.trial_id}) hello from {r.config['i']}\n" in out
    assert "Tune finished" in out and "2 TERMINATED" in out


def test_optuna_beats_random_search_on_a_quadratic(warm):
    from raynb.tune.search.optuna import OptunaSearch

    def objective(config):
        from raynb import tune

        tune.report({"loss": (config["x"] - 1.7) ** 2 + (config["y"] + 0.6) ** 2})

    space = {"x": tune.uniform(-10, 10), "y": tune.uniform(-10, 10)}
    wins, bests = [], []
    for seed in (0, 1, 2):
        best = {}
        for name, alg in (
            ("optuna", OptunaSearch(seed=seed)),
            ("random", BasicVariantGenerator(random_state=seed)),
        ):
            grid = tune.Tuner(
                objective,
                param_space=space,
                tune_config=tune.TuneConfig(
                    metric="loss", mode="min", num_samples=60, search_alg=alg, max_concurrent_trials=1
                ),
                run_config=QUIET,
            ).fit()
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
    tuner = tune.Tuner(
        _reports_acc,
        param_space={"i": tune.grid_search([0, 1])},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=QUIET,
    )
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
        tune.Tuner(
            quadratic,
            param_space={"x": 1},
            tune_config=tune.TuneConfig(
                metric="loss", mode="min", scheduler=ASHAScheduler(metric="acc", mode="max")
            ),
        )
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
    if not any(n["gpus"] for n in warm.status()["nodes"]):
        with pytest.raises(ValueError, match=r"needs 1 GPU\(s\).*cluster has 0"):
            tune.Tuner(
                TorchTrainer(_ddp_trial, scaling_config=ScalingConfig(num_workers=1, use_gpu=True))
            ).fit()
    with pytest.raises(ValueError, match="needs metric= and mode="):
        from raynb.tune.search.optuna import OptunaSearch

        tune.Tuner(
            quadratic,
            param_space={"x": tune.uniform(0, 1)},
            tune_config=tune.TuneConfig(search_alg=OptunaSearch()),
        ).fit()
    assert len(warm.status()["runs"]) == runs_before  # no trial was submitted


def test_overhead_benchmark_quick_prints_json(tmp_path):
    out = run_benchmark("tune_overhead.py", tmp_path, timeout=240)
    o = out["overhead"]
    assert o["trials"] == 20 and o["concurrency"] == 2 and o["total_s"] > 0 and o["work_s"] >= 0
    assert o["per_trial_overhead_ms"] == pytest.approx(
        (o["total_s"] - o["work_s"]) / 20 * 1000, abs=0.06
    )  # inputs rounded to ms
    s = out["stop"]["stop_to_next_start_ms"]
    assert s["n"] == 4 and 0 < s["median"] <= s["p90"] <= s["max"]


# --- checkpoints: PBT's exploit, resuming from a checkpoint --------------------------------


def _pbt_trainable(config):
    import json
    import os
    import tempfile
    import time

    from raynb import tune
    from raynb.train import Checkpoint

    me = tune.get_context().get_experiment_name()  # the trial's run directory name
    state = {"w": 0.0, "owner": me, "steps": 0}
    resumed_from = None
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = json.load(open(os.path.join(d, "state.json")))
        resumed_from = state["owner"]
    for _ in range(10):
        state["w"] += config["lr"]
        state["steps"] += 1
        state["owner"] = me
        with tempfile.TemporaryDirectory() as d:
            json.dump(state, open(os.path.join(d, "state.json"), "w"))
            tune.report(
                {"w": state["w"], "lr": config["lr"], "steps": state["steps"], "resumed_from": resumed_from},
                checkpoint=Checkpoint.from_directory(d),
            )
        time.sleep(0.03)


def test_pbt_exploit_resumes_from_the_donor_checkpoint_with_a_perturbed_config(warm):
    from raynb.tune.schedulers import PopulationBasedTraining

    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=3,
        hyperparam_mutations={"lr": [0.01, 0.1, 1.0, 10.0]},
        quantile_fraction=0.25,
        resample_probability=0.0,
        seed=0,
    )
    grid = tune.Tuner(
        _pbt_trainable,
        param_space={"lr": tune.grid_search([0.01, 0.1, 1.0, 10.0])},
        tune_config=tune.TuneConfig(metric="w", mode="max", scheduler=pbt),
        run_config=QUIET,
    ).fit()
    assert [r.status for r in grid] == ["TERMINATED"] * 4
    by_dir = {Path(r.path).name: r for r in grid}
    exploited = [r for r in grid if any(m.get("resumed_from") for m in r._reports)]
    assert exploited, [r.metrics for r in grid]
    for r in exploited:
        first = next(m for m in r._reports if m.get("resumed_from"))
        donor = by_dir[first["resumed_from"]]
        assert donor is not r  # it carries another trial's weights...
        # ...from that trial's checkpoint, copied into its own run directory: the resumed
        # state continues the donor's step count, not its own
        adopted = [json.loads((c / "state.json").read_text()) for c in Path(r.path).glob("checkpoint_*")]
        adopted = [a for a in adopted if a["owner"] == Path(donor.path).name]
        assert any(a["steps"] + 1 == first["steps"] for a in adopted), (adopted, first)
        # with the donor's config perturbed (x1.2 or x0.8 then snapped to the list: a neighbour)
        assert first["lr"] in (0.01, 0.1, 1.0, 10.0)
        assert json.loads((Path(r.path) / "params.json").read_text()) == r.config
        its = [m["training_iteration"] for m in r._reports]
        assert its == list(range(1, len(its) + 1))  # one run, counting on across the exploit
    assert grid.get_best_result().trial_id in {r.trial_id for r in grid}


def _counting_with_checkpoints(config):
    import json
    import os
    import tempfile
    import time

    from raynb import tune
    from raynb.train import Checkpoint

    start = 0
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = json.load(open(os.path.join(d, "c.json")))["step"] + 1
    for step in range(start, 400):
        with tempfile.TemporaryDirectory() as d:
            json.dump({"step": step}, open(os.path.join(d, "c.json"), "w"))
            tune.report({"step": step, "started_at_step": start}, checkpoint=Checkpoint.from_directory(d))
        if os.path.exists(config["marker"]):
            return
        time.sleep(0.05)


def test_interrupted_trials_resume_from_their_checkpoint(warm, tmp_path):
    marker = str(tmp_path / "go")
    tuner = tune.Tuner(
        _counting_with_checkpoints,
        param_space={"k": tune.grid_search([0, 1]), "marker": marker},
        run_config=QUIET,
    )
    timer = _interrupt_after(1.0)
    try:
        grid = tuner.fit()
    finally:
        timer.cancel()
    assert [r.status for r in grid] == ["PAUSED", "PAUSED"]
    before = [len(r._reports) for r in grid]
    assert all(n >= 3 for n in before), before
    Path(marker).touch()
    grid2 = tune.Tuner.restore(grid.experiment_path, _counting_with_checkpoints).fit()
    assert [r.status for r in grid2] == ["TERMINATED", "TERMINATED"]
    for r, n in zip(grid2, before):
        last = r.metrics
        assert last["started_at_step"] > 0  # get_checkpoint() handed back the last checkpoint
        assert last["step"] == last["started_at_step"]  # and it ended after one more report
        assert last["training_iteration"] == len(r._reports) == n + 1  # the run counts on
        assert (
            r.checkpoint is not None
            and json.loads((Path(r.checkpoint.path) / "c.json").read_text())["step"] == last["step"]
        )
        assert r.best_checkpoints and r.best_checkpoints[-1][0].path == r.checkpoint.path


def test_restore_requeue_keeps_a_trial_with_a_checkpoint_and_restarts_one_without(tmp_path):
    from raynb.tune.trial import Trial
    from raynb.tune.tuner import _requeue

    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    (a_dir / "checkpoint_000001").mkdir(parents=True)
    b_dir.mkdir()
    (b_dir / "result.json").write_text('{"x": 1}\n')
    a = Trial(
        "a",
        {},
        status="PAUSED",
        results=[{"x": 1}],
        path=str(a_dir),
        checkpoint=str(a_dir / "checkpoint_000001"),
    )
    b = Trial(
        "b",
        {},
        status="RUNNING",
        results=[{"x": 1}],
        path=str(b_dir),
        checkpoint=str(b_dir / "checkpoint_000000"),
    )  # recorded, but gone from disk
    _requeue(a, from_checkpoint=True)
    _requeue(b, from_checkpoint=True)
    assert a.status == b.status == "PENDING"
    assert a.results == [{"x": 1}] and a_dir.exists()  # resumed by the head from its checkpoint
    assert b.results == [] and b.checkpoint is None and not b_dir.exists()  # starts over


def test_get_best_result_scopes_nan_and_clear_errors():
    from raynb.tune.result_grid import ResultGrid
    from raynb.tune.trial import Trial

    def t(tid, losses, status="TERMINATED"):
        return Trial(
            tid,
            {"id": tid},
            status=status,
            results=[{"loss": v, "training_iteration": i + 1} for i, v in enumerate(losses)],
        )

    grid = ResultGrid(
        [t("a", [5, 1, 4]), t("b", [3, 3, 3]), t("c", [float("nan")]), t("d", [], "PENDING")],
        "/x",
        "loss",
        "min",
    )
    assert grid.get_best_result().trial_id == "b"  # last: 3 < 4
    assert grid.get_best_result(scope="all").trial_id == "a"  # its best report, 1
    assert grid.get_best_result(scope="avg").trial_id == "b"  # 3 < 10/3
    assert grid.get_best_result(mode="max").trial_id == "a"
    with pytest.raises(ValueError, match="scope"):
        grid.get_best_result(scope="best")
    with pytest.raises(ValueError, match="needs a metric and a mode"):
        ResultGrid([t("a", [1])], "/x").get_best_result()
    with pytest.raises(RuntimeError, match=r"reported \['loss'\]"):
        grid.get_best_result(metric="acc")
    with pytest.raises(RuntimeError, match="no trial reported anything"):
        ResultGrid([t("d", [], "PENDING")], "/x", "loss", "min").get_best_result()
    df = grid.get_dataframe()
    assert list(df["trial_id"]) == ["a", "b", "c", "d"] and list(df["status"])[-1] == "PENDING"
    assert df.loc[3, "training_iteration"] is None or df["training_iteration"].isna().iloc[3]


def _with_data(config, data=None, scale=1):
    from raynb import tune

    tune.report({"score": sum(data) * scale * config["m"]})


def test_with_parameters_binds_extra_arguments(warm):
    fn = tune.with_parameters(_with_data, data=[1, 2, 3], scale=10)
    grid = tune.Tuner(
        fn,
        param_space={"m": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=QUIET,
    ).fit()
    assert [r.metrics["score"] for r in grid] == [60, 120]
    assert Path(grid[0].path).name.startswith("_with_data_")  # named after the wrapped function
    with pytest.raises(TypeError, match="takes a function"):
        tune.with_parameters(3)
