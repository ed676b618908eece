"""The dashboard's runs list says of a Tune trial what the notebook says: a trial stopped by a
stopper (its run STOPPED) and a FIFO trial (its run FINISHED) are TERMINATED, a failed one
ERROR, and each names its experiment's directory, under which the page groups the trials.
Against the session's real cluster, through the dashboard's own gateway."""

from __future__ import annotations

import os

import pytest

from raynb import tune
from raynb.notebook.dashboard.gateway import ClusterGateway
from raynb.train import RunConfig


def _trial(config):
    if config["kind"] == "fails":
        raise ValueError("this trial fails")
    # "stopped": stopped by the stopper at its 2nd report; "done": ends by itself after one.
    import time

    for i in range(40 if config["kind"] == "stopped" else 1):
        tune.report({"loss": 1.0 / (i + 1)})
        time.sleep(0.25 if config["kind"] == "stopped" else 0)


@pytest.fixture(scope="module")
def experiment(cluster, tmp_path_factory):
    storage = tmp_path_factory.mktemp("dash_trials")
    tuner = tune.Tuner(
        _trial,
        param_space={"kind": tune.grid_search(["stopped", "done", "fails"])},
        tune_config=tune.TuneConfig(max_concurrent_trials=3),
        run_config=RunConfig(
            name="dash_exp", storage_path=str(storage), verbose=0, stop={"training_iteration": 2}
        ),
    )
    return tuner.fit()


def _listed(experiment_path: str) -> dict:
    gateway = ClusterGateway()
    try:
        runs = gateway.run_list()["runs"]
    finally:
        gateway.close()
    return {r["name"]: r for r in runs if r.get("experiment_path") == experiment_path}


def test_trials_have_the_notebooks_status_and_their_experiment(experiment, cluster):
    path = os.path.normpath(experiment.experiment_path)
    listed = _listed(path)
    kinds = {os.path.basename(r.path): r.config["kind"] for r in experiment}
    assert set(listed) == set(kinds), (listed.keys(), kinds)
    got = {kinds[n]: (r["state"], r["trial_status"]) for n, r in listed.items()}
    assert got == {
        "stopped": ("STOPPED", "TERMINATED"),
        "done": ("FINISHED", "TERMINATED"),
        "fails": ("FAILED", "ERROR"),
    }, got
    assert {r["experiment"] for r in listed.values()} == {"dash_exp"}
    plain = [r for r in ClusterGateway().runs() if not r.get("experiment")]
    assert all("trial_status" not in r for r in plain)


def test_without_the_state_file_the_runs_state_is_mapped_as_the_driver_does(experiment):
    path = os.path.normpath(experiment.experiment_path)
    state = os.path.join(path, "experiment_state.json")
    os.rename(state, state + ".aside")
    try:
        got = sorted(r["trial_status"] for r in _listed(path).values())
    finally:
        os.rename(state + ".aside", state)
    assert got == ["ERROR", "TERMINATED", "TERMINATED"]
