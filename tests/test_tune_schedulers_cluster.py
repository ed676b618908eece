"""Schedulers driven by the real Tuner on the warm cluster: the trials stop where the
hand-computed rung tables of tests/test_tune_schedulers.py say they must."""
from __future__ import annotations

import sys

import cloudpickle

from raynb import tune
from raynb.train import RunConfig
from raynb.tune.schedulers import ASHAScheduler, HyperBandScheduler

from conftest import wait_idle_workers

cloudpickle.register_pickle_by_value(sys.modules[__name__])

QUIET = RunConfig(verbose=0)


def curve(config):
    """accuracy = score * t at report t (monotone), up to 20 reports."""
    import time

    from raynb import tune

    for t in range(1, 21):
        tune.report({"acc": config["score"] * t})
        time.sleep(0.01)


def _stopped_at(grid) -> dict:
    return {r.config["score"]: r.metrics["training_iteration"] for r in grid}


def test_asha_via_the_tuner_stops_the_trials_of_the_rung_table(warm):
    # One trial at a time, in grid order: the sequential table of
    # test_asha_rf2_sequential_matches_hand_rung_table (grace 1, rf 2, max_t 8).
    scores = [5, 3, 8, 1, 6, 7.5, 2, 4]
    grid = tune.Tuner(curve, param_space={"score": tune.grid_search(scores)},
                      tune_config=tune.TuneConfig(
                          metric="acc", mode="max", max_concurrent_trials=1,
                          scheduler=ASHAScheduler(max_t=8, grace_period=1, reduction_factor=2)),
                      run_config=QUIET).fit()
    assert grid.num_errors == 0
    assert _stopped_at(grid) == dict(zip(scores, [8, 1, 8, 1, 2, 8, 1, 1]))
    assert all(r.status == "STOPPED" for r in grid)   # none ran its 20 reports
    wait_idle_workers(warm, 4, timeout=3)


def test_hyperband_via_the_tuner_stops_the_trials_of_its_table(warm):
    # test_hyperband_sequential_stops_on_arrival_when_outranked: R=9, eta=3, bracket s=2.
    scores = [5, 3, 8, 1, 6, 7.5, 2, 4, 9]
    grid = tune.Tuner(curve, param_space={"score": tune.grid_search(scores)},
                      tune_config=tune.TuneConfig(
                          metric="acc", mode="max", max_concurrent_trials=1,
                          scheduler=HyperBandScheduler(max_t=9, reduction_factor=3)),
                      run_config=QUIET).fit()
    assert grid.num_errors == 0
    assert _stopped_at(grid) == dict(zip(scores, [9, 3, 9, 1, 3, 3, 1, 1, 9]))
    wait_idle_workers(warm, 4, timeout=3)
