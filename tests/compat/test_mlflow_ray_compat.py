"""MLflow as Ray's integration does it, read back from real MLflow stores (file and sqlite),
with real Tune trials running at once: ``raynb.air.integrations.mlflow``'s
``MLflowLoggerCallback`` (Ray's arguments, a new file store, Ray's result keys, one flat run
per trial) and ``setup_mlflow`` (``config["mlflow"]``, the experiment's own store, no race
between trials that open one store together)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mlflow")

import raynb  # noqa: E402
from raynb import tune  # noqa: E402
from raynb.air.integrations.mlflow import MLflowLoggerCallback, setup_mlflow  # noqa: E402
from raynb.train import (  # noqa: E402
    RunConfig,
    ScalingConfig,
    mlflow_store,  # noqa: E402
)

ROOT = Path(__file__).resolve().parents[2]
RAY_KEYS = {
    "config/x",
    "config/opt/lr",
    "done",
    "training_iteration",
    "iterations_since_restore",
    "time_this_iter_s",
    "time_total_s",
    "time_since_restore",
    "timestamp",
    "score",
}


@pytest.fixture
def no_mlflow_env(monkeypatch, tmp_path):
    for k in (
        "MLFLOW_TRACKING_URI",
        "MLFLOW_EXPERIMENT_NAME",
        "MLFLOW_EXPERIMENT_ID",
        "MLFLOW_ALLOW_FILE_STORE",
    ):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.chdir(tmp_path)  # the ranks run in the driver's working directory too
    yield
    os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)


def _client(uri):
    from mlflow.tracking import MlflowClient

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # reading back a file store
    return MlflowClient(mlflow_store.tracking_uri(uri))


def reports(config):
    for i in range(3):
        tune.report({"score": config["x"] * (i + 1)})


def logs_with_setup(config):
    import time

    mlflow = setup_mlflow(config)
    for i in range(3):
        mlflow.log_metric("inner", config["x"] * i, step=i)
        time.sleep(0.05)
    tune.report({"score": config["x"]})


def _tuner(fn, param_space, callbacks=(), name="mlflow_compat"):
    return tune.Tuner(
        fn,
        param_space=param_space,
        tune_config=tune.TuneConfig(max_concurrent_trials=4),
        run_config=RunConfig(name=name, verbose=0, callbacks=list(callbacks)),
    ).fit()


@pytest.mark.parametrize("kind", ["relative_file_store", "file_uri", "sqlite"])
def test_callback_logs_one_flat_run_per_trial_with_rays_keys(kind, warm, tmp_path, no_mlflow_env):
    uri = {
        "relative_file_store": "./mlruns",
        "file_uri": (tmp_path / "abs_mlruns").as_uri(),
        "sqlite": f"sqlite:///{tmp_path}/cb.db",
    }[kind]
    cb = MLflowLoggerCallback(
        uri, experiment_name="cb", tags={"team": "t"}, log_params_on_trial_end=(kind == "sqlite")
    )
    grid = _tuner(reports, {"x": tune.grid_search([1, 2, 3, 4]), "opt": {"lr": 0.1}}, [cb])
    assert not [r.error for r in grid if r.error]
    client = _client(uri)
    runs = client.search_runs([client.get_experiment_by_name("cb").experiment_id])
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)
    assert not [r for r in runs if "mlflow.parentRunId" in r.data.tags]  # flat, as Ray's
    by_trial = {r.data.tags["trial_name"]: r for r in runs}
    for result in grid:
        run = by_trial[Path(result.path).name]
        x = result.config["x"]
        assert run.data.tags["team"] == "t"
        assert run.data.params == {"x": str(x), "opt/lr": "0.1"}
        assert RAY_KEYS <= set(run.data.metrics), set(run.data.metrics)
        assert run.data.metrics["config/x"] == x and run.data.metrics["done"] == 1.0
        assert run.data.metrics["training_iteration"] == 3 == run.data.metrics["iterations_since_restore"]
        history = client.get_metric_history(run.info.run_id, "score")
        assert sorted((m.step, m.value) for m in history) == [(1, x), (2, 2 * x), (3, 3 * x)]
    if kind == "relative_file_store":
        assert (tmp_path / "mlruns").is_dir()


@pytest.mark.parametrize("kind", ["file_store", "new_sqlite"])
def test_setup_mlflow_reads_config_mlflow_in_trials_running_at_once(kind, warm, tmp_path, no_mlflow_env):
    uri = "./mixin_runs" if kind == "file_store" else f"sqlite:///{tmp_path}/mixin.db"
    grid = _tuner(
        logs_with_setup,
        {"x": tune.grid_search([1, 2, 3, 4]), "mlflow": {"tracking_uri": uri, "experiment_name": "mixin"}},
    )
    assert not [r.error for r in grid if r.error], [r.error for r in grid]
    client = _client(uri)
    runs = client.search_runs([client.get_experiment_by_name("mixin").experiment_id])
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)
    assert sorted(r.data.params["x"] for r in runs) == ["1", "2", "3", "4"]
    assert not [k for r in runs for k in r.data.params if k.startswith("mlflow")]  # the settings are no param
    assert sorted(r.data.metrics["inner"] for r in runs) == [2.0, 4.0, 6.0, 8.0]
    assert not (tmp_path / "mlflow.db").exists()


def test_setup_mlflow_without_a_uri_uses_the_experiments_own_store(warm, tmp_path, no_mlflow_env):
    name = f"own_store_{os.getpid()}"
    grid = _tuner(logs_with_setup, {"x": tune.grid_search([1, 2, 3, 4])}, name=name)
    assert not [r.error for r in grid if r.error], [r.error for r in grid]
    db = Path(grid.experiment_path) / "mlflow.db"
    assert db.is_file() and not (tmp_path / "mlflow.db").exists()
    client = _client(f"sqlite:///{db}")
    runs = client.search_runs([client.get_experiment_by_name(name).experiment_id])
    assert sorted(r.info.run_name for r in runs) == sorted(Path(r.path).name for r in grid)


def refuses_a_missing_experiment(config):
    setup_mlflow(
        config, tracking_uri=config["uri"], experiment_name="absent", create_experiment_if_not_exists=False
    )


def test_setup_mlflow_missing_experiment_without_create_names_the_fix(warm, tmp_path, no_mlflow_env):
    from raynb.train.torch import TorchTrainer

    with pytest.raises(raynb.RunError, match="create_experiment_if_not_exists=True"):
        TorchTrainer(
            refuses_a_missing_experiment,
            train_loop_config={"uri": f"sqlite:///{tmp_path}/m.db"},
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(verbose=0),
        ).fit()


def test_config_mlflow_with_an_unknown_key_is_refused(warm, tmp_path, no_mlflow_env):
    from raynb.train.torch import TorchTrainer

    with pytest.raises(raynb.RunError, match="tracking_url"):
        TorchTrainer(
            setup_mlflow,
            train_loop_config={"mlflow": {"tracking_url": "x"}},
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(verbose=0),
        ).fit()


OPEN_STORE = textwrap.dedent("""
    import sys
    from mlflow.tracking import MlflowClient
    from raynb.train import mlflow_store
    uri = sys.argv[1]
    with mlflow_store.allowing_file_store(uri), mlflow_store.store_lock(uri):
        print(mlflow_store.experiment_id(MlflowClient(uri), name="together"))
""")


@pytest.mark.parametrize("kind", ["new_sqlite", "file_store"])
def test_processes_opening_a_new_store_together_agree(kind, tmp_path):
    uri = f"sqlite:///{tmp_path}/new.db" if kind == "new_sqlite" else (tmp_path / "mlruns").as_uri()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_ALLOW_FILE_STORE", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_STORE, uri],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-1500:] for _, err in outs]
    assert len({out.strip() for out, _ in outs}) == 1, outs


def test_tracking_uri_forms():
    assert mlflow_store.tracking_uri("./mlruns", base="/a/b") == "file:///a/b/mlruns"
    assert mlflow_store.tracking_uri("file:///tmp/x/../mlruns") == "file:///tmp/mlruns"
    assert mlflow_store.tracking_uri("sqlite:///mlflow.db") == "sqlite:///mlflow.db"
    assert mlflow_store.tracking_uri("http://host:5000") == "http://host:5000"
    assert mlflow_store.tracking_uri(None) is None
    import raynb.integrations.mlflow as ours

    assert MLflowLoggerCallback is ours.MLflowLoggerCallback and setup_mlflow is ours.setup_mlflow


def test_rays_mlflow_example_with_its_imports_changed(cluster, tmp_path):
    """ray/tune/examples/mlflow_example.py from the installed wheel: the callback on a file
    store, then setup_mlflow(config) with config["mlflow"], 5 trials each."""
    ray = pytest.importorskip("ray")
    source = (Path(ray.__file__).parent / "tune" / "examples" / "mlflow_example.py").read_text()
    source = source.replace("from ray.air.integrations.mlflow", "from raynb.air.integrations.mlflow").replace(
        "from ray import tune", "from raynb import tune"
    )
    assert "ray." not in source.replace("raynb.", ""), (
        "the example imports more of Ray than this test changes"
    )
    script = tmp_path / "mlflow_example.py"
    script.write_text(source)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    for k in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_ALLOW_FILE_STORE"):
        env.pop(k, None)
    proc = subprocess.run(
        [sys.executable, str(script), "--smoke-test"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    client = _client(str(tmp_path / "mlruns"))
    for name, keys in (
        ("example", {"mean_loss", "config/width", "done", "training_iteration"}),
        ("mixin_example", {"mean_loss"}),
    ):
        runs = client.search_runs([client.get_experiment_by_name(name).experiment_id])
        assert len(runs) == 5 and {r.info.status for r in runs} == {"FINISHED"}, name
        assert all(keys <= set(r.data.metrics) for r in runs), (name, runs[0].data.metrics)
