"""A warm worker starts each run with MLflow's process state as a fresh process has it: what
an earlier run's own code set (tracking URI, experiment) does not reach it, and a run the
earlier function left open is ended, as MLflow's exit hook ends it in a fresh process."""

from __future__ import annotations

import json
import os

from conftest import wait_idle_workers

from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer


def _leave_mlflow_set(config):
    import mlflow

    mlflow.set_tracking_uri(config["uri"])
    mlflow.set_experiment("left-by-an-earlier-run")
    mlflow.start_run(run_name=f"open-{os.getpid()}")  # never ended by the function
    mlflow.log_metric("m", 1.0)
    with open(os.path.join(config["out"], f"first-{os.getpid()}"), "w"):
        pass


def _read_mlflow_state(config):
    import mlflow
    import mlflow.tracking.fluent as fluent

    seen = {
        "uri": mlflow.get_tracking_uri(),
        "experiment": fluent._active_experiment_id,
        "open_run": mlflow.active_run() is not None,
    }
    with open(os.path.join(config["out"], f"after-{os.getpid()}.json"), "w") as f:
        json.dump(seen, f)


def _fit(fn, config, workers):
    return TorchTrainer(
        fn,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(verbose=0),
    ).fit()


def test_mlflow_state_a_run_set_does_not_reach_the_next_run_on_the_same_workers(
    cluster, tmp_path, monkeypatch
):
    for k in [k for k in os.environ if k.startswith("MLFLOW_")]:
        monkeypatch.delenv(k)
    wait_idle_workers(cluster, 4)
    uri, out = f"sqlite:///{tmp_path}/left.db", tmp_path / "out"
    out.mkdir()
    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=uri)  # made once: ranks opening a new
    experiment_id = client.create_experiment("left-by-an-earlier-run")  # sqlite store race
    first = _fit(_leave_mlflow_set, {"uri": uri, "out": str(out)}, 4)
    assert first.error is None, first.error
    after = _fit(_read_mlflow_state, {"out": str(out)}, 4)
    assert after.error is None, after.error
    first_pids = {p.name.split("-")[1] for p in out.glob("first-*")}
    seen = {p.stem.split("-")[1]: json.loads(p.read_text()) for p in out.glob("after-*.json")}
    assert first_pids & seen.keys(), (first_pids, seen)  # warm workers that ran both
    for pid in first_pids & seen.keys():
        assert not seen[pid]["uri"].startswith(f"sqlite:///{tmp_path}"), seen[pid]
        assert seen[pid]["experiment"] is None and not seen[pid]["open_run"], seen[pid]
    # each worker's open run was ended as a fresh process's exit would end it: FINISHED
    runs = client.search_runs([experiment_id])
    assert len(runs) == 4 and {r.info.status for r in runs} == {"FINISHED"}, [r.info for r in runs]
