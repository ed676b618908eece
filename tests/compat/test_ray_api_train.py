"""Ray's process and Train names on raynb, on the warm cluster: raynb.init / shutdown /
is_initialized with Ray's arguments (runtime_env's env_vars and working_dir reach the ranks),
raynb.air's module paths, DataConfig(datasets_to_split=...), and XGBoost's training_iteration
equal to the boosting rounds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cloudpickle
import numpy as np
import pytest

import raynb
from raynb.train import DataConfig, RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

cloudpickle.register_pickle_by_value(sys.modules[__name__])
ROOT = str(Path(__file__).resolve().parents[2])

INIT_SCRIPT = """
import os, sys
import raynb
from raynb.train import ScalingConfig, RunConfig
from raynb.train.torch import TorchTrainer

assert not raynb.is_initialized()
raynb.init(num_cpus=4, configure_logging=False, log_to_driver=True, namespace="x",
           runtime_env={"env_vars": {"MY_FLAG": "on"}, "working_dir": sys.argv[1]})
assert raynb.is_initialized()
raynb.init(ignore_reinit_error=True)
try:
    raynb.init()
except RuntimeError as e:
    print("REINIT", e)

def loop():
    import os
    import helper_mod   # importable from the working_dir only
    raynb.train.report({"flag": os.environ.get("MY_FLAG"), "cwd": os.getcwd(), "h": helper_mod.VALUE})

result = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(verbose=0)).fit()
print("RESULT", result.metrics["flag"], result.metrics["cwd"], result.metrics["h"])
raynb.shutdown()
assert not raynb.is_initialized()

def after():
    import os
    raynb.train.report({"flag": str(os.environ.get("MY_FLAG"))})

print("AFTER", TorchTrainer(after, scaling_config=ScalingConfig(num_workers=1),
                            run_config=RunConfig(verbose=0)).fit().metrics["flag"])
raynb.shutdown()
"""


def test_init_runtime_env_reaches_the_ranks_and_shutdown_forgets_it(cluster, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "helper_mod.py").write_text("VALUE = 42\n")
    script = tmp_path / "script.py"
    script.write_text(INIT_SCRIPT)
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run(
        [sys.executable, str(script), str(work)],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"RESULT on {work} 42" in out.stdout
    assert "AFTER None" in out.stdout  # the env var went with the run, and shutdown forgot it
    assert "REINIT" in out.stdout and "ignore_reinit_error=True" in out.stdout
    # accepted with no effect: one line each, once
    assert out.stderr.count("raynb.init(namespace=...) is accepted and has no effect") == 1


def test_init_refuses_what_it_cannot_honour():
    with pytest.raises(TypeError, match="'num_cpu'"):
        raynb.init(num_cpu=2)
    with pytest.raises(ValueError, match="local_mode"):
        raynb.init(local_mode=True)
    with pytest.raises(ValueError, match=r"runtime_env\['pip'\]"):
        raynb.init(runtime_env={"pip": ["torch"]})
    with pytest.raises(ValueError, match="not a local directory"):
        raynb.init(runtime_env={"working_dir": "s3://bucket/code.zip"})
    with pytest.raises(ValueError, match="Ray Client"):
        raynb.init("ray://head:10001")
    assert not raynb.client.ray_init._initialized


def test_air_module_paths():
    import raynb.air.integrations  # noqa: F401
    from raynb.air import RunConfig as AirRunConfig
    from raynb.air import session
    from raynb.air.config import CheckpointConfig, FailureConfig
    from raynb.air.config import ScalingConfig as AirScaling
    from raynb.tune.integration.xgboost import TuneReportCallback, TuneReportCheckpointCallback  # noqa: F401
    from raynb.tune.logger import CSVLoggerCallback, TBXLoggerCallback  # noqa: F401
    from raynb.tune.progress_reporter import CLIReporter, JupyterNotebookReporter  # noqa: F401
    from raynb.tune.stopper import CombinedStopper  # noqa: F401

    assert AirRunConfig is RunConfig and AirScaling is ScalingConfig
    assert CheckpointConfig is raynb.CheckpointConfig and FailureConfig is raynb.FailureConfig
    assert callable(session.report) and callable(session.get_world_rank)


def _shards(config):
    import raynb

    a = raynb.train.get_dataset_shard("train").count()
    b = raynb.train.get_dataset_shard("valid").count()
    raynb.train.report({"train": a, "valid": b})


def test_data_config_splits_only_the_named_datasets(cluster):
    data = {
        "train": raynb.data.from_numpy({"x": np.arange(100.0)}),
        "valid": raynb.data.from_numpy({"x": np.arange(40.0)}),
    }
    quiet = RunConfig(verbose=0)
    split_all = TorchTrainer(
        _shards, scaling_config=ScalingConfig(num_workers=2), datasets=data, run_config=quiet
    ).fit()
    assert split_all.metrics["train"] == 50 and split_all.metrics["valid"] == 20
    only_train = TorchTrainer(
        _shards,
        scaling_config=ScalingConfig(num_workers=2),
        datasets=data,
        run_config=quiet,
        dataset_config=DataConfig(datasets_to_split=["train"]),
    ).fit()
    assert only_train.metrics["train"] == 50 and only_train.metrics["valid"] == 40
    with pytest.raises(TypeError, match="datasets_to_split"):
        DataConfig(datasets_to_split="train")


def test_plain_trainer_refuses_stop_as_ray_train_does():
    with pytest.raises(ValueError, match="RunConfig\\(stop=...\\)"):
        TorchTrainer(_shards, run_config=RunConfig(stop={"training_iteration": 2})).fit()


def _xgb_loop(config):
    import xgboost

    import raynb
    from raynb.train.xgboost import RayTrainReportCallback

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5))
    y = (X[:, 0] > 0).astype(int)
    d = xgboost.DMatrix(X, label=y)
    xgboost.train(
        {"objective": "binary:logistic", "eval_metric": "logloss"},
        d,
        num_boost_round=10,
        evals=[(d, "train")],
        callbacks=[RayTrainReportCallback()],
    )
    assert raynb.train.get_context() is not None


def test_xgboost_training_iteration_equals_the_rounds(cluster):
    import pandas as pd

    from raynb.train.xgboost import XGBoostTrainer

    result = TorchTrainer(
        _xgb_loop, scaling_config=ScalingConfig(num_workers=1), run_config=RunConfig(verbose=0)
    ).fit()
    assert result.metrics["training_iteration"] == 10 and len(result.metrics_dataframe) == 10
    assert result.checkpoint is not None  # the final model, with the last round's report
    rng = np.random.default_rng(1)
    df = pd.DataFrame(rng.normal(size=(500, 4)), columns=list("abcd")).assign(
        y=lambda f: (f.a > 0).astype(int)
    )
    trainer = XGBoostTrainer(
        params={"objective": "binary:logistic", "eval_metric": "logloss"},
        label_column="y",
        num_boost_round=10,
        datasets={"train": raynb.data.from_pandas(df)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(verbose=0),
    )
    result = trainer.fit()
    assert result.metrics["training_iteration"] == 10
    assert XGBoostTrainer.get_model(result.checkpoint).num_boosted_rounds() == 10
