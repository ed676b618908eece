"""Schedulers driven by the real Tuner on the warm cluster: the trials stop where the
hand-computed rung tables of tests/tune/test_tune_schedulers.py say they must, and PBT
restarts bottom trials from a top trial's checkpoint with a perturbed config."""

from __future__ import annotations

import sys

import cloudpickle
import pytest
from conftest import wait_idle_workers

from raynb import tune
from raynb.train import RunConfig
from raynb.tune.schedulers import ASHAScheduler, HyperBandScheduler

cloudpickle.register_pickle_by_value(sys.modules[__name__])

QUIET = RunConfig(verbose=0)


def curve(config):
    """accuracy = score * t at report t (monotone), up to 20 reports."""
    import time

    from raynb import tune

    for t in range(1, 21):
        tune.report({"acc": config["score"] * t})
        time.sleep(0.03)


def _recording(cls):
    """``cls`` noting the iteration of each STOP it decides, keyed by the trial's score.

    Reports a trial makes after a STOP (before the cancel reaches it) are kept in its
    results, so the decisions are read here, where they are made."""

    class Recording(cls):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.stopped_at = {}

        def on_trial_result(self, trial, result):
            decision = super().on_trial_result(trial, result)
            if decision == "STOP":
                self.stopped_at[trial.config["score"]] = result["training_iteration"]
            return decision

    return Recording


def _check(grid, sched, scores, expected, max_t):
    assert grid.num_errors == 0
    assert sched.stopped_at == dict(zip(scores, expected))
    # Stopped at a rung or for having used the whole budget (max_t): TERMINATED, as in Ray 2.60.
    assert [r.status for r in grid] == ["TERMINATED"] * len(expected)
    assert [r._trial.extra.get("early_stopped") for r in grid] == [e != max_t for e in expected]
    for r in grid:  # the cancel cut every run short (20 reports take >= 0.6 s)
        assert r.metrics["training_iteration"] < 20, r.metrics


def test_asha_via_the_tuner_stops_the_trials_of_the_rung_table(warm):
    # One trial at a time, in grid order: the sequential table of
    # test_asha_rf2_sequential_matches_hand_rung_table (grace 1, rf 2, max_t 8).
    scores = [5, 3, 8, 1, 6, 7.5, 2, 4]
    sched = _recording(ASHAScheduler)(max_t=8, grace_period=1, reduction_factor=2)
    grid = tune.Tuner(
        curve,
        param_space={"score": tune.grid_search(scores)},
        tune_config=tune.TuneConfig(metric="acc", mode="max", max_concurrent_trials=1, scheduler=sched),
        run_config=QUIET,
    ).fit()
    _check(grid, sched, scores, [8, 1, 8, 1, 2, 8, 1, 1], max_t=8)
    wait_idle_workers(warm, 4, timeout=3)


def test_hyperband_via_the_tuner_stops_the_trials_of_its_table(warm):
    # test_hyperband_sequential_stops_on_arrival_when_outranked: R=9, eta=3, bracket s=2.
    scores = [5, 3, 8, 1, 6, 7.5, 2, 4, 9]
    sched = _recording(HyperBandScheduler)(max_t=9, reduction_factor=3)
    grid = tune.Tuner(
        curve,
        param_space={"score": tune.grid_search(scores)},
        tune_config=tune.TuneConfig(metric="acc", mode="max", max_concurrent_trials=1, scheduler=sched),
        run_config=QUIET,
    ).fit()
    _check(grid, sched, scores, [9, 3, 9, 1, 3, 3, 1, 1, 9], max_t=9)
    wait_idle_workers(warm, 4, timeout=3)


def walker(config):
    """w grows by lr per step; (w, step) travel in the checkpoint, so a restored trial carries on."""
    import json
    import os
    import tempfile
    import time

    from raynb import tune

    w, step, restored = 0.0, 0, None
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            with open(os.path.join(d, "state.json")) as f:
                restored = json.load(f)
        w, step = restored["w"], restored["step"]
    while step < 6:
        step += 1
        w += config["lr"]
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"w": w, "step": step}, f)
            extra = {"restored_w": restored["w"], "restored_step": restored["step"]} if restored else {}
            tune.report(
                {"w": w, "step": step, "lr": config["lr"], **extra},
                checkpoint=tune.Checkpoint.from_directory(d),
            )
        restored = None
        time.sleep(0.1)  # leaves the driver time to exploit before the trial ends


def test_pbt_via_the_tuner_restarts_bottom_trials_from_a_top_checkpoint(warm):
    from raynb.tune.schedulers import PopulationBasedTraining

    lrs = [0.1, 0.2, 0.3, 1.0]
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=3,
        hyperparam_mutations={"lr": tune.uniform(0.01, 2.0)},
        resample_probability=0.0,
        seed=0,
    )
    grid = tune.Tuner(
        walker,
        param_space={"lr": tune.grid_search(lrs)},
        tune_config=tune.TuneConfig(metric="w", mode="max", scheduler=pbt, max_concurrent_trials=4),
        run_config=QUIET,
    ).fit()
    assert grid.num_errors == 0
    reports = {r.trial_id: r._reports for r in grid}
    restarts = [(tid, i) for tid, rs in reports.items() for i, m in enumerate(rs) if "restored_w" in m]
    assert restarts, {tid: [m["lr"] for m in rs] for tid, rs in reports.items()}
    for tid, i in restarts:
        first = reports[tid][i]
        # The restored state is one the donor reported (its checkpoint was copied) ...
        donors = [
            d
            for d, rs in reports.items()
            if d != tid
            and any(
                m["step"] == first["restored_step"] and m["w"] == pytest.approx(first["restored_w"])
                for m in rs
            )
        ]
        assert donors, first
        # ... the config is a donor's lr times 0.8 or 1.2 (explore, resample_probability=0) ...
        donor_lrs = {m["lr"] for d in donors for m in reports[d]}
        assert any(first["lr"] == pytest.approx(f * lr) for lr in donor_lrs for f in (0.8, 1.2)), (
            first["lr"],
            donor_lrs,
        )
        # ... and training carries on from the donor's state with the new lr.
        assert first["step"] == first["restored_step"] + 1
        assert first["w"] == pytest.approx(first["restored_w"] + first["lr"])
        assert reports[tid][i - 1]["lr"] != first["lr"]
    wait_idle_workers(warm, 4, timeout=3)


def lagging_rank(config):
    """Three reports on 2 ranks; the third carries rank 0's checkpoint (step 3), and rank 1
    reaches it ``config["lag"]`` seconds after rank 0."""
    import json
    import os
    import tempfile
    import time

    import torch.distributed as dist

    from raynb import tune
    from raynb.train import get_context

    rank = get_context().get_world_rank()
    for step in (1, 2, 3):
        if step < 3:
            tune.report({"loss": 1.0 / step})
        elif rank == 0:
            dist.barrier()
            time.sleep(0.2)  # rank 1's first reports are in: the head knows it reports
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "state.json"), "w") as f:
                    json.dump({"step": step}, f)
                tune.report({"loss": 1.0 / step}, checkpoint=tune.Checkpoint.from_directory(d))
        else:
            dist.barrier()
            time.sleep(config["lag"])
            if config.get("fail"):
                raise RuntimeError("rank 1 fails after the STOP")
            tune.report({"loss": 1.0 / step})


def _lagging_fit(lag: float, fail: bool = False):
    from raynb.train import ScalingConfig
    from raynb.train.torch import TorchTrainer

    trainer = TorchTrainer(
        lagging_rank,
        train_loop_config={"lag": lag, "fail": fail},
        scaling_config=ScalingConfig(num_workers=2),
    )
    # ASHA stops the trial at max_t=3, on rank 0's third report: the one with the checkpoint.
    sched = ASHAScheduler(time_attr="training_iteration", max_t=3, grace_period=1)
    return tune.Tuner(
        trainer, tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=sched), run_config=QUIET
    ).fit()


def test_a_stop_on_a_checkpointed_report_keeps_that_checkpoint_when_a_rank_lags(warm):
    # The STOP is decided on rank 0's report, 0.8 s before rank 1 reaches it and the head can
    # commit the checkpoint; a cancel sent at once cut rank 1 short and the checkpoint was lost
    # (05_xgboost.ipynb's best trial, stopped by ASHA at max_t, had none).
    import json
    import os

    grid = _lagging_fit(lag=0.8)
    [result] = list(grid)
    # Stopped for having used its whole budget (max_t): TERMINATED.
    assert grid.num_errors == 0 and result.status == "TERMINATED", (result.status, result.error)
    assert result.metrics["training_iteration"] == 3
    assert result.checkpoint is not None, "the checkpoint of the report ASHA stopped on was lost"
    with open(os.path.join(result.checkpoint.path, "state.json")) as f:
        assert json.load(f) == {"step": 3}
    wait_idle_workers(warm, 4, timeout=3)


def test_a_held_stop_is_sent_anyway_when_a_rank_never_reaches_the_report(warm, monkeypatch):
    import time

    from raynb.tune import held_stops

    monkeypatch.setattr(held_stops, "COMMIT_WAIT_S", 0.5)
    t0 = time.monotonic()
    grid = _lagging_fit(lag=60.0)
    # Stopped 0.5 s after the STOP (plus the head's 1 s grace to kill the sleeping rank),
    # not 60 s later; the uncommitted checkpoint is not a checkpoint.
    assert time.monotonic() - t0 < 20
    [result] = list(grid)
    assert grid.num_errors == 0 and result.status == "TERMINATED", (result.status, result.error)
    assert result.checkpoint is None
    wait_idle_workers(warm, 4, timeout=10)


def test_a_rank_failing_while_the_stop_is_held_leaves_the_trial_stopped(warm):
    # With the cancel sent at once the failing rank would have been cut short; a stopped
    # trial is stopped (as in Ray Tune), and its run's record keeps the error.
    from raynb import Result

    grid = _lagging_fit(lag=0.3, fail=True)
    [result] = list(grid)
    assert grid.num_errors == 0 and result.status == "TERMINATED", (result.status, result.error)
    assert result.checkpoint is None and result.metrics["training_iteration"] == 3
    run = Result.from_path(result.path)
    assert run.state == "FAILED" and "rank 1 fails after the STOP" in str(run.error)
    wait_idle_workers(warm, 4, timeout=10)


def rank0_reports(config):
    """Only rank 0 reports (a checkpoint with its third report): the others never reach it."""
    import os
    import tempfile

    from raynb import tune
    from raynb.train import get_context

    if get_context().get_world_rank() != 0:
        return
    for step in (1, 2, 3):
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "w.txt"), "w").close()
            tune.report(
                {"loss": 1.0 / step}, checkpoint=tune.Checkpoint.from_directory(d) if step == 3 else None
            )


def test_a_stop_is_not_held_for_ranks_that_never_report(warm, monkeypatch):
    # Its checkpoint could only commit at the run's end: a held STOP would wait 10 s for nothing.
    from raynb.train import ScalingConfig
    from raynb.train.torch import TorchTrainer
    from raynb.tune import held_stops

    holds = []
    real_hold = held_stops.HeldStops.hold
    monkeypatch.setattr(held_stops.HeldStops, "hold", lambda self, *a: (holds.append(a), real_hold(self, *a)))
    sched = ASHAScheduler(time_attr="training_iteration", max_t=3, grace_period=1)
    grid = tune.Tuner(
        TorchTrainer(rank0_reports, scaling_config=ScalingConfig(num_workers=2)),
        tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=sched),
        run_config=QUIET,
    ).fit()
    [result] = list(grid)
    assert grid.num_errors == 0 and result.metrics["training_iteration"] == 3
    assert holds == []
    # And the hook sees holds where there are some: the lagging rank's trial is held once.
    _lagging_fit(lag=0.3)
    assert len(holds) == 1 and holds[0][2] == 3, holds
    wait_idle_workers(warm, 4, timeout=3)
