"""Ray 2.60's framework names beside the trainers: the deprecated per-framework checkpoint
classes (they warn and still save and load the model under Ray's file names),
``XGBoostConfig`` / ``LightGBMConfig``, ``normalize_pandas_for_lightgbm``, and
``ray.train.torch.accelerate`` (deprecated: raises, as Ray 2.60's)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from raynb.train import BackendConfig
from raynb.train.lightgbm import LightGBMCheckpoint, LightGBMConfig, normalize_pandas_for_lightgbm
from raynb.train.tensorflow import TensorflowCheckpoint
from raynb.train.torch import TorchCheckpoint, TorchConfig, accelerate
from raynb.train.xgboost import XGBoostCheckpoint, XGBoostConfig, XGBoostTrainer


@pytest.fixture
def made():
    """Directories the checkpoints made (Ray's from_model writes a new temporary directory)."""
    paths: list = []
    yield paths
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)


def test_torch_checkpoint_round_trips_a_state_dict_and_a_model_and_warns(made):
    model = torch.nn.Linear(3, 2)
    with pytest.warns(DeprecationWarning, match="raynb.train.Checkpoint"):
        ckpt = TorchCheckpoint.from_state_dict({f"module.{k}": v for k, v in model.state_dict().items()})
    made.append(ckpt.path)
    assert os.listdir(ckpt.path) == ["model.pt"]
    loaded = ckpt.get_model(torch.nn.Linear(3, 2))  # the DDP prefix was removed
    assert torch.equal(loaded.weight, model.weight)
    with pytest.raises(ValueError, match="pass the model"):
        ckpt.get_model()
    with pytest.warns(DeprecationWarning):
        whole = TorchCheckpoint.from_model(model)
    made.append(whole.path)
    assert torch.equal(whole.get_model().bias, model.bias)


def test_xgboost_and_lightgbm_checkpoints_keep_rays_file_names(made):
    import lightgbm
    import xgboost

    x = np.random.default_rng(0).normal(size=(64, 3))
    y = (x[:, 0] > 0).astype(int)
    booster = xgboost.train({"objective": "binary:logistic"}, xgboost.DMatrix(x, label=y), num_boost_round=2)
    with pytest.warns(DeprecationWarning):
        ck = XGBoostCheckpoint.from_model(booster)
    made.append(ck.path)
    assert os.listdir(ck.path) == ["model.json"]
    assert np.allclose(ck.get_model().predict(xgboost.DMatrix(x)), booster.predict(xgboost.DMatrix(x)))
    gbm = lightgbm.train({"objective": "binary", "verbose": -1}, lightgbm.Dataset(x, y), num_boost_round=2)
    with pytest.warns(DeprecationWarning):
        lk = LightGBMCheckpoint.from_model(gbm)
    made.append(lk.path)
    assert os.listdir(lk.path) == ["model.txt"]
    assert np.allclose(lk.get_model().predict(x), gbm.predict(x))
    with pytest.raises(ValueError, match="existing directory"):
        XGBoostCheckpoint.from_model(booster, path="/nonexistent/dir")


def test_tensorflow_checkpoint_refuses_bad_paths_without_importing_tensorflow(tmp_path):
    with pytest.raises(ValueError, match=r"\.h5 file"):
        TensorflowCheckpoint.from_h5(str(tmp_path / "model.keras"))
    with pytest.warns(DeprecationWarning):
        plain = TensorflowCheckpoint(str(tmp_path))
    with pytest.raises(ValueError, match="from_model"):
        plain.get_model()


def test_normalize_pandas_for_lightgbm_maps_arrow_columns_only():
    import pyarrow as pa

    df = pd.DataFrame(
        {
            "i": pd.array([1, 2], dtype=pd.ArrowDtype(pa.int32())),
            "u": pd.array([1, 2], dtype=pd.ArrowDtype(pa.uint8())),
            "f": pd.array([0.5, 1.5], dtype=pd.ArrowDtype(pa.float64())),
            "b": pd.array([True, False], dtype=pd.ArrowDtype(pa.bool_())),
            "s": pd.array(["a", "b"], dtype=pd.ArrowDtype(pa.string())),
            "n": np.array([1.0, 2.0]),
        }
    )
    out = normalize_pandas_for_lightgbm(df)
    assert [str(t) for t in out.dtypes] == [
        "Int32",
        "UInt8",
        "Float64",
        "boolean",
        "string[pyarrow]",
        "float64",
    ]
    plain = pd.DataFrame({"n": [1.0]})
    assert normalize_pandas_for_lightgbm(plain) is plain
    with pytest.raises(TypeError, match="pandas DataFrame"):
        normalize_pandas_for_lightgbm([1, 2])


def test_backend_configs_and_their_bad_input():
    assert isinstance(TorchConfig(), BackendConfig) and TorchConfig().framework == "torch"
    assert XGBoostConfig().to_dict() == {"xgboost_communicator": "rabit"}
    assert LightGBMConfig().framework == "lightgbm"
    with pytest.raises(ValueError, match="only 'rabit'"):
        XGBoostConfig(xgboost_communicator="nccl")
    with pytest.raises(TypeError, match="XGBoostConfig"):
        XGBoostTrainer(lambda: None, xgboost_config={"xgboost_communicator": "rabit"})
    XGBoostTrainer(lambda: None, xgboost_config=XGBoostConfig())  # Ray's keyword is taken


def test_accelerate_is_deprecated_as_in_ray():
    with pytest.raises(DeprecationWarning, match="torch.autocast"):
        accelerate(amp=True)
