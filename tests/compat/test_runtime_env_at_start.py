"""``raynb.init(runtime_env={"env_vars": ...})`` is set on each rank as Ray sets it at a
worker's start: a module the function imports reads it at import (unpickling) time, a
subprocess inherits it, and the warm worker has it put back after the run. The driver's
``MLFLOW_*`` variables reach the ranks too (Ray's workers inherit their driver's
environment), so a plain MLflow call on a rank logs to the driver's store and experiment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])

PROBE = """
import json, os, subprocess, sys
AT_IMPORT = os.environ.get("RAYNB_T_ENV")  # read when the rank unpickles the function

def probe(out_dir, tag):
    import raynb
    rank = raynb.train.get_context().get_world_rank()
    child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('RAYNB_T_ENV'))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    seen = {"pid": os.getpid(), "import": AT_IMPORT, "call": os.environ.get("RAYNB_T_ENV"),
            "child": child, "mlflow_uri": os.environ.get("MLFLOW_TRACKING_URI"),
            "mlflow_experiment": os.environ.get("MLFLOW_EXPERIMENT_NAME")}
    if tag == "first" and rank == 0:
        import mlflow  # no set_tracking_uri / set_experiment: the environment decides
        with mlflow.start_run():
            mlflow.log_metric("rank_metric", 7.0)
    with open(os.path.join(out_dir, f"{tag}-{rank}.json"), "w") as f:
        json.dump(seen, f)
"""

DRIVER = """
import os, sys
work, out, store, name = sys.argv[1:5]
sys.path.insert(0, work)
os.environ["MLFLOW_TRACKING_URI"] = "file://" + store
os.environ["MLFLOW_EXPERIMENT_NAME"] = "from-driver"
os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
import raynb
from raynb import RunConfig, ScalingConfig, TorchTrainer
raynb.init(runtime_env={"env_vars": {"RAYNB_T_ENV": "from-runtime-env"}})
probe = __import__(name)

def first():
    probe.probe(out, "first")

TorchTrainer(first, scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(verbose=0)).fit()
raynb.shutdown()
for k in [k for k in os.environ if k.startswith("MLFLOW_")]:
    del os.environ[k]

def after():
    probe.probe(out, "after")

raynb.connect()
TorchTrainer(after, scaling_config=ScalingConfig(num_workers=4), run_config=RunConfig(verbose=0)).fit()
print("DONE")
"""


def test_env_vars_are_set_before_unpickling_and_mlflow_env_reaches_the_ranks(cluster, tmp_path, monkeypatch):
    name = f"envprobe_{uuid.uuid4().hex[:8]}"  # a module no warm worker imported before
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    (work / f"{name}.py").write_text(PROBE)
    store = tmp_path / "mlruns"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    r = subprocess.run(
        [sys.executable, "-c", DRIVER, str(work), str(out), str(store), name],
        cwd=str(tmp_path),
        env={**env, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0 and "DONE" in r.stdout, r.stderr[-3000:]
    first = [json.loads((out / f"first-{i}.json").read_text()) for i in range(2)]
    for seen in first:
        assert seen["import"] == "from-runtime-env", seen  # set before the function was unpickled
        assert seen["call"] == seen["child"] == "from-runtime-env", seen
        assert seen["mlflow_uri"] == f"file://{store}" and seen["mlflow_experiment"] == "from-driver", seen
    after = [json.loads((out / f"after-{i}.json").read_text()) for i in range(4)]
    assert {s["pid"] for s in first} <= {s["pid"] for s in after}  # the same warm workers
    for seen in after:
        assert seen["call"] is None and seen["child"] == "None", seen  # put back after the run
        assert seen["mlflow_uri"] is None and seen["mlflow_experiment"] is None, seen
    # rank 0's plain MLflow call logged to the driver's store, in the driver's experiment
    import mlflow

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = mlflow.tracking.MlflowClient(tracking_uri=f"file://{store}")
    experiment = client.get_experiment_by_name("from-driver")
    assert experiment is not None, os.listdir(store)
    runs = client.search_runs([experiment.experiment_id])
    assert [run.data.metrics for run in runs] == [{"rank_metric": 7.0}]
