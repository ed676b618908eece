"""Callbacks (Ray Tune's interface) on the real warm cluster: the order and arguments of
the hooks for a TorchTrainer fit and a Tuner with an early-stopping scheduler, a callback
that raises or sleeps never slowing a rank, bad input; TensorBoard event files read back
with TensorBoard's reader; MLflow runs read back from a real sqlite store with mlflow's
own client."""

from __future__ import annotations

import socket
import sys
import threading
import time

import cloudpickle
import pytest
from conftest import wait_idle_workers
from support.quick_benchmark import run_benchmark

import raynb
from raynb import tune
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer
from raynb.tune import Callback
from raynb.tune.callback import CallbackError
from raynb.tune.schedulers import ASHAScheduler

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def steps(config):
    """``n`` reports (nested metrics), a checkpoint with the ``ckpt_at``-th; the time of
    each step on this rank is returned by rank 0."""
    import os
    import tempfile
    import time

    import raynb

    took = []
    for i in range(1, config.get("n", 3) + 1):
        t = time.perf_counter()
        time.sleep(config.get("work_s", 0.0))
        metrics = {"loss": 1.0 / i, "nested": {"acc": 0.1 * i}, "epoch": i}
        if i == config.get("ckpt_at"):
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "w.txt"), "w") as f:
                    f.write(str(i))
                raynb.report(metrics, checkpoint=raynb.Checkpoint.from_directory(d))
        else:
            raynb.report(metrics)
        took.append(time.perf_counter() - t)
    if config.get("fail"):
        raise ValueError("boom at the end")
    return took


class Recorder(Callback):
    """Notes every hook call as a tuple, in a list shared with the test."""

    def __init__(self, log: list, tag: str = "r"):
        self.log, self.tag = log, tag

    def _note(self, *event):
        self.log.append((self.tag,) + event)

    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info):
        self._note("setup", info["kind"], info["experiment_path"])

    def on_trial_start(self, iteration, trials, trial, **info):
        self._note("start", trial.trial_id, trial.status, trial.path, dict(trial.config))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._note("result", trial.trial_id, result["training_iteration"], len(trial.results), iteration)

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        self._note("checkpoint", trial.trial_id, checkpoint.path)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._note("complete", trial.trial_id, trial.status, trial.last_result.get("training_iteration"))

    def on_trial_error(self, iteration, trials, trial, **info):
        self._note("error", trial.trial_id, trial.status, trial.error)

    def on_experiment_end(self, trials, **info):
        self._note("end", sorted(t.trial_id for t in trials))


def _hooks(log, tag="r"):
    return [e[1] for e in log if e[0] == tag]


# -- bad input ------------------------------------------------------------------------------
def test_a_callback_that_is_not_one_is_a_type_error_naming_its_type_before_the_run(warm):
    with pytest.raises(TypeError, match=r"item 1, of type dict, is not a raynb.tune.Callback"):
        RunConfig(callbacks=[Recorder([]), {"on_trial_result": print}])
    with pytest.raises(TypeError, match=r"the class Recorder; pass an instance"):
        RunConfig(callbacks=[Recorder])
    before = len(warm.status()["runs"])
    rc = RunConfig(verbose=0)
    rc.callbacks = [42]  # set after construction: still refused before anything ships
    with pytest.raises(TypeError, match="of type int"):
        TorchTrainer(steps, scaling_config=ScalingConfig(num_workers=1), run_config=rc).fit()
    with pytest.raises(TypeError, match="of type int"):
        tune.Tuner(steps, run_config=rc).fit()
    assert len(warm.status()["runs"]) == before


# -- order and arguments --------------------------------------------------------------------
def test_trainer_fit_is_an_experiment_of_one_trial_in_order(warm):
    log: list = []
    result = TorchTrainer(
        steps,
        train_loop_config={"n": 3, "ckpt_at": 2},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(verbose=0, callbacks=[Recorder(log, "a"), Recorder(log, "b")]),
    ).fit()
    assert result.state == "FINISHED"
    a = [e[1:] for e in log if e[0] == "a"]
    assert [e[1:] for e in log if e[0] == "b"] == a  # both saw the same, in the same order
    # Callbacks run in the order given: each event reaches a, then b.
    assert [e[0] for e in log] == ["a", "b"] * len(a)
    assert [e[0] for e in a] == [
        "setup",
        "start",
        "result",
        "result",
        "checkpoint",
        "result",
        "complete",
        "end",
    ] or [e[0] for e in a] == [
        "setup",
        "start",
        "result",
        "result",
        "result",
        "checkpoint",
        "complete",
        "end",
    ]
    assert a[0] == ("setup", "TorchTrainer", result.path)
    trial_id = a[1][1]
    assert a[1] == ("start", trial_id, "RUNNING", result.path, {"n": 3, "ckpt_at": 2})
    results = [e for e in a if e[0] == "result"]
    assert [(e[2], e[3]) for e in results] == [(1, 1), (2, 2), (3, 3)]  # iteration, len(trial.results)
    assert [e[4] for e in results] == sorted(e[4] for e in results)  # the event count grows
    (ckpt,) = [e for e in a if e[0] == "checkpoint"]
    assert ckpt[2] == result.checkpoint.path
    assert a[-2] == ("complete", trial_id, "TERMINATED", 3)
    assert a[-1] == ("end", [trial_id])


def test_a_failed_fit_gets_on_trial_error(warm):
    log: list = []
    with pytest.raises(raynb.RunError) as e:
        TorchTrainer(
            steps,
            train_loop_config={"n": 1, "fail": True},
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(verbose=0, callbacks=[Recorder(log)]),
        ).fit()
    assert _hooks(log) == ["setup", "start", "result", "error", "end"]
    err = [x for x in log if x[1] == "error"][0]
    assert err[3] == "ERROR" and "ValueError: boom at the end" in err[4]
    assert e.value.result.state == "FAILED"


def curve(config):
    """accuracy = score * t at report t, up to 20 reports; score 0 raises first."""
    import time

    from raynb import tune

    if config["score"] == 0:
        raise RuntimeError("no score")
    for t in range(1, 21):
        tune.report({"acc": config["score"] * t})
        time.sleep(0.03)


def test_tuner_with_early_stopping_stopped_trials_complete_errors_error(warm):
    # One trial at a time, in grid order (tests/tune/test_tune_schedulers_cluster.py's ASHA table):
    # 5 runs to max_t (TERMINATED), 3 is stopped at its first rung (TERMINATED too, as in Ray), 0 raises.
    log: list = []
    sched = ASHAScheduler(max_t=4, grace_period=1, reduction_factor=2)
    grid = tune.Tuner(
        curve,
        param_space={"score": tune.grid_search([5, 3, 0])},
        tune_config=tune.TuneConfig(metric="acc", mode="max", max_concurrent_trials=1, scheduler=sched),
        run_config=RunConfig(verbose=0, callbacks=[Recorder(log)]),
    ).fit()
    by_score = {r.config["score"]: r for r in grid}
    assert [by_score[s].status for s in (5, 3, 0)] == ["TERMINATED", "TERMINATED", "ERROR"]
    hooks = _hooks(log)
    assert hooks[0] == "setup" and log[0][2] == "Tuner" and log[0][3] == grid.experiment_path
    assert hooks[-1] == "end"
    ids = {s: by_score[s].trial_id for s in by_score}
    assert log[-1][2] == sorted(ids.values())
    for score, expect in (
        (5, ["start"] + ["result"] * 4 + ["complete"]),
        (3, ["start", "result", "complete"]),
        (0, ["start", "error"]),
    ):
        events = [e for e in log if len(e) > 2 and e[2] == ids[score]]
        assert [e[1] for e in events] == expect, (score, events)
    done = {e[2]: e for e in log if e[1] in ("complete", "error")}
    assert done[ids[5]][3:] == ("TERMINATED", 4)
    assert done[ids[3]][3:] == ("TERMINATED", 1)  # results end at the STOP, as the trial's do
    assert done[ids[0]][3] == "ERROR" and "RuntimeError: no score" in done[ids[0]][4]
    start = [e for e in log if e[1] == "start" and e[2] == ids[5]][0]
    assert start[4] == by_score[5].path and start[5] == {"score": 5}


# -- errors and slow callbacks never reach the ranks ------------------------------------------
class Raises(Callback):
    def on_trial_result(self, iteration, trials, trial, result, **info):
        raise KeyError(f"bad callback at {result['training_iteration']}")


class Strict(Raises):
    fail_on_error = True


_release = threading.Event()


class Sleeps(Callback):
    """Sleeps 1 s per result (or until the test releases it)."""

    def __init__(self):
        self.seen = 0

    def on_trial_result(self, iteration, trials, trial, result, **info):
        _release.wait(1.0)
        self.seen += 1


def test_a_raising_callback_is_shown_once_and_skipped_the_others_go_on(warm, capsys):
    log: list = []
    result = TorchTrainer(
        steps,
        train_loop_config={"n": 4},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(verbose=0, callbacks=[Raises(), Recorder(log)]),
    ).fit()
    assert result.state == "FINISHED"
    assert _hooks(log) == ["setup", "start"] + ["result"] * 4 + ["complete", "end"]
    err = capsys.readouterr().err
    assert err.count("Raises.on_trial_result() raised") == 1, err
    assert "KeyError: 'bad callback at 1'" in err and "Traceback" in err
    assert "bad callback at 2" not in err


def test_fail_on_error_cancels_the_run_and_fit_raises(warm):
    t = time.monotonic()
    with pytest.raises(CallbackError, match=r"Strict.on_trial_result\(\) raised KeyError") as e:
        TorchTrainer(
            steps,
            train_loop_config={"n": 200, "work_s": 0.05},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(verbose=0, name=f"strict_{time.time_ns()}", callbacks=[Strict()]),
        ).fit()
    assert time.monotonic() - t < 6.0  # not the 10 s the run would take
    assert isinstance(e.value.__cause__, KeyError)
    name = [r for r in warm.status()["runs"] if r["name"].startswith("strict_")][-1]["name"]
    assert raynb.get_run(name).state == "CANCELLED"
    wait_idle_workers(warm, 4)
    with pytest.raises(CallbackError):
        tune.Tuner(
            curve,
            param_space={"score": tune.grid_search([1, 2])},
            run_config=RunConfig(verbose=0, callbacks=[Strict()]),
        ).fit()
    wait_idle_workers(warm, 4)


def test_a_slow_or_raising_callback_never_slows_a_rank(warm, capsys, monkeypatch):
    from raynb.train.fit_run import execute_run

    monkeypatch.setenv("RAYNB_CALLBACK_DRAIN_S", "0.5")
    _release.clear()
    slow = Sleeps()
    t = time.monotonic()
    try:
        result, per_step = execute_run(
            steps,
            {"n": 10, "work_s": 0.02},
            ScalingConfig(num_workers=2),
            RunConfig(verbose=0, callbacks=[Raises(), slow]),
        )
        wall = time.monotonic() - t
    finally:
        _release.set()  # let the callback thread finish its backlog now
    assert result.state == "FINISHED"
    # Rank 0's step times (a 20 ms step and its report()): a callback step is 1 s.
    assert max(per_step) < 0.5, per_step
    assert sum(per_step) / len(per_step) < 0.15, per_step
    # fit() came back once the run ended and the bounded drain (0.5 s) ran out, not after
    # 10 x 1 s of callback work.
    assert wall < 5.0, wall
    assert slow.seen < 10
    err = capsys.readouterr().err
    assert "have not caught up after 0.5s" in err
    assert err.count("Raises.on_trial_result() raised") == 1


# -- TensorBoard -------------------------------------------------------------------------------
def _events(path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(path))
    ea.Reload()
    return ea


def _hparams(ea) -> dict:
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = ea.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    info = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    return {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in info.hparams.items()}


def test_tensorboard_events_of_a_fit_and_of_a_tuner_read_back(warm):
    from raynb.tune.logger import TBXLoggerCallback

    result = TorchTrainer(
        steps,
        train_loop_config={"n": 3, "opt": {"lr": 0.5, "name": "sgd"}},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(verbose=0, callbacks=[TBXLoggerCallback()]),
    ).fit()
    ea = _events(result.path)
    assert [(s.step, s.value) for s in ea.Scalars("loss")] == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    assert [s.step for s in ea.Scalars("nested/acc")] == [1, 2, 3]  # nested dicts flattened as a/b
    assert "training_iteration" not in ea.Tags()["scalars"] and "timestamp" not in ea.Tags()["scalars"]
    assert _hparams(ea) == {"n": 3, "opt/lr": 0.5, "opt/name": "sgd"}

    grid = tune.Tuner(
        curve,
        param_space={"score": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(
            metric="acc", mode="max", scheduler=ASHAScheduler(max_t=3, grace_period=3)
        ),
        run_config=RunConfig(verbose=0, callbacks=[TBXLoggerCallback()]),
    ).fit()
    for r in grid:
        ea = _events(r.path)  # one TensorBoard run per trial, under the experiment directory
        assert [(s.step, s.value) for s in ea.Scalars("acc")][:3] == [
            (t, r.config["score"] * t) for t in (1, 2, 3)
        ]
        assert _hparams(ea) == {"score": r.config["score"]}
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    mux = EventMultiplexer().AddRunsFromDirectory(grid.experiment_path)  # what %tensorboard --logdir reads
    mux.Reload()
    assert len(mux.Runs()) == 2


# -- MLflow ------------------------------------------------------------------------------------
def _client(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def _metric_steps(client, run_id, key):
    return [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


def test_mlflow_run_of_a_fit_read_back_with_artifacts(warm, tmp_path):
    from raynb.integrations import MLflowLoggerCallback

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = _client(uri)
    exp_id = client.create_experiment("fit", artifact_location=str(tmp_path / "artifacts"))
    cb = MLflowLoggerCallback(uri, experiment_name="fit", tags={"team": "raynb"}, save_artifact=True)
    result = TorchTrainer(
        steps,
        train_loop_config={"n": 3, "ckpt_at": 2, "opt": {"lr": 0.5}},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(verbose=0, callbacks=[cb]),
    ).fit()
    (run,) = client.search_runs([exp_id])
    assert run.info.status == "FINISHED"
    assert run.data.params == {"n": "3", "ckpt_at": "2", "opt/lr": "0.5"}
    assert run.data.tags["team"] == "raynb" and run.data.tags["mlflow.runName"] == result.name
    assert "mlflow.parentRunId" not in run.data.tags
    assert _metric_steps(client, run.info.run_id, "loss") == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    assert _metric_steps(client, run.info.run_id, "nested/acc")[0] == (1, pytest.approx(0.1))
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id)]  # the run directory, as Ray's
    ckpt = result.checkpoint.path.rstrip("/").rsplit("/", 1)[-1]
    assert ckpt in artifacts and "result.json" in artifacts, artifacts
    assert [a.path for a in client.list_artifacts(run.info.run_id, ckpt)] == [f"{ckpt}/w.txt"]


def test_mlflow_tuner_nests_trial_runs_under_the_experiment_when_asked(warm, tmp_path):
    from raynb.integrations import MLflowLoggerCallback

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    sched = ASHAScheduler(max_t=4, grace_period=1, reduction_factor=2)
    grid = tune.Tuner(
        curve,
        param_space={"score": tune.grid_search([5, 3, 0])},
        tune_config=tune.TuneConfig(metric="acc", mode="max", max_concurrent_trials=1, scheduler=sched),
        run_config=RunConfig(
            verbose=0,
            name=f"nested_{time.time_ns()}",
            callbacks=[MLflowLoggerCallback(uri, nest_trials_in_parent_run=True)],
        ),
    ).fit()
    client = _client(uri)
    exp = client.get_experiment_by_name(grid.experiment_path.rsplit("/", 1)[-1])  # default: its name
    runs = client.search_runs([exp.experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.status == "FINISHED" and parent.info.run_name == exp.name
    children = {r.data.tags["trial_id"]: r for r in runs if r is not parent}
    assert len(children) == 3
    assert all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id for r in children.values())
    for r in grid:
        run = children[r.trial_id]
        assert run.data.params == {"score": str(r.config["score"])}
        assert run.info.status == ("FAILED" if r.status == "ERROR" else "FINISHED"), r.status
        if r.status != "ERROR":
            assert _metric_steps(client, run.info.run_id, "acc") == [
                (t, r.config["score"] * t) for t in range(1, len(r._reports) + 1)
            ]


def test_mlflow_unreachable_tracking_uri_warns_once_and_training_goes_on(warm, capsys):
    from raynb.integrations import MLflowLoggerCallback

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    result = TorchTrainer(
        steps,
        train_loop_config={"n": 3},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(verbose=0, callbacks=[MLflowLoggerCallback(uri)]),
    ).fit()
    assert result.state == "FINISHED" and result.metrics["training_iteration"] == 3
    err = capsys.readouterr().err
    assert err.count("warning:") == 1, err
    assert f"MLflowLoggerCallback cannot reach the MLflow tracking store '{uri}'" in err
    assert "the training goes on" in err


def logs_with_setup_mlflow(config):
    import torch.distributed

    import raynb
    from raynb.train import setup_mlflow

    mlflow = setup_mlflow(config, tracking_uri=config["uri"], experiment_name="in_fn")
    for step in range(1, 4):
        mlflow.log_metric("loss", 1.0 / step, step=step)
    torch.distributed.barrier()  # rank 1 does not end the run before rank 0 has logged
    if config.get("fail") and raynb.get_context().get_world_rank() == 0:
        raise ValueError("after logging")
    return type(mlflow).__name__, raynb.get_context().get_world_rank()


def test_setup_mlflow_logs_from_rank_zero_only_and_ends_the_run(warm, tmp_path):
    from raynb.train.fit_run import execute_run

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    result, ret = execute_run(
        logs_with_setup_mlflow,
        {"uri": uri, "lr": {"a": 1}},
        ScalingConfig(num_workers=2),
        RunConfig(verbose=0),
    )
    assert ret == ("module", 0)
    client = _client(uri)
    exp = client.get_experiment_by_name("in_fn")
    (run,) = client.search_runs([exp.experiment_id])  # rank 1 logged nothing
    assert run.info.status == "FINISHED" and run.info.run_name == result.name
    assert run.data.params == {"uri": uri, "lr/a": "1"}
    assert _metric_steps(client, run.info.run_id, "loss") == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    # The same warm workers again: a function that raises ends its run FAILED, and the
    # earlier run was not left active on the worker.
    with pytest.raises(raynb.RunError):
        execute_run(
            logs_with_setup_mlflow,
            {"uri": uri, "fail": True},
            ScalingConfig(num_workers=2),
            RunConfig(verbose=0),
        )
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])
    assert [r.info.status for r in runs] == ["FINISHED", "FAILED"]


# -- the benchmark -----------------------------------------------------------------------------
def test_callbacks_benchmark_quick_prints_json_side_by_side(tmp_path):
    out = run_benchmark("callbacks.py", tmp_path, timeout=300)
    modes = ["none", "tensorboard", "mlflow"]
    assert list(out["warm_rerun_ms"]) == modes and list(out["reports_1000"]) == modes
    for m in modes:
        assert out["warm_rerun_ms"][m]["n"] == 3 and out["warm_rerun_ms"][m]["median"] > 0
        big = out["reports_1000"][m]
        assert big["fit_wall_s"] > 0 and big["rank_report_us"]["p50"] > 0
    assert set(out["report_path"]) == {"target_us", "worst_mean_us", "over_target_us"}
    assert isinstance(out["machine"]["load_avg_1m_at_start"], float)
