"""LightGBMTrainer on the real warm cluster: one model over 2 ranks through LightGBM's
socket network, a validation metric within 0.03 of single-process LightGBM's on the same
data, identical models on every rank, checkpoints and resume, bad input named, and a warm
second fit faster than the first."""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest

lightgbm = pytest.importorskip("lightgbm")

from raynb.train import RunConfig, ScalingConfig  # noqa: E402
from raynb.train.lightgbm import LightGBMTrainer, RayTrainReportCallback  # noqa: E402

pytestmark = pytest.mark.lightgbm
cloudpickle.register_pickle_by_value(sys.modules[__name__])

PARAMS = {
    "objective": "binary",
    "metric": "binary_logloss",
    "num_leaves": 15,
    "learning_rate": 0.1,
    "seed": 0,
    "deterministic": True,
}


def _frames():
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer(as_frame=True)
    df = data.frame.rename(columns=lambda c: c.replace(" ", "_")).rename(columns={"target": "y"})
    df = df.sample(frac=1.0, random_state=0).reset_index(drop=True)
    cut = int(len(df) * 0.75)
    return df.iloc[:cut].reset_index(drop=True), df.iloc[cut:].reset_index(drop=True)


def _single(train, valid, rounds):
    dtrain = lightgbm.Dataset(train.drop(columns="y"), label=train["y"])
    dvalid = lightgbm.Dataset(valid.drop(columns="y"), label=valid["y"], reference=dtrain)
    log = {}
    lightgbm.train(
        dict(PARAMS, num_threads=1, verbose=-1),
        dtrain,
        rounds,
        valid_sets=[dvalid],
        valid_names=["valid"],
        callbacks=[lightgbm.record_evaluation(log)],
    )
    return log["valid"]["binary_logloss"][-1]


def _fit(tmp_path, workers=2, rounds=30, **kwargs):
    train, valid = _frames()
    return LightGBMTrainer(
        params=PARAMS,
        label_column="y",
        num_boost_round=rounds,
        datasets={"train": train, "valid": valid},
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
        **kwargs,
    ).fit()


def test_warm_second_fit_is_faster_than_the_first(warm, tmp_path):
    # First in the file, on all 4 workers: the first fit imports lightgbm into each.
    t0 = time.perf_counter()
    _fit(tmp_path / "a", workers=4, rounds=5)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    _fit(tmp_path / "b", workers=4, rounds=5)
    second = time.perf_counter() - t0
    assert second < first, (first, second)


def test_two_rank_validation_metric_matches_single_process(warm, tmp_path):
    train, valid = _frames()
    single = _single(train, valid, 30)
    result = _fit(tmp_path)
    df = result.metrics_dataframe
    assert len(df) == 30 and list(df["epoch"]) == list(range(30))
    distributed = df["valid-binary_logloss"].iloc[-1]
    assert abs(distributed - single) < 0.03, (distributed, single)
    assert df["valid-binary_logloss"].iloc[-1] < df["valid-binary_logloss"].iloc[0]
    booster = LightGBMTrainer.get_model(result.checkpoint)
    assert booster.current_iteration() == 30
    pred = booster.predict(valid.drop(columns="y"))
    assert ((pred > 0.5) == valid["y"]).mean() > 0.9


def _hash_every_rank(config):
    import hashlib

    import lightgbm as lgb
    import torch
    import torch.distributed as dist

    from raynb.train.lightgbm import get_network_params, shard_frame

    part = shard_frame("train")
    net = get_network_params()
    params = dict(config["params"], tree_learner="data", pre_partition=True, num_threads=1, verbose=-1, **net)
    booster = lgb.train(
        params,
        lgb.Dataset(part.drop(columns="y"), label=part["y"]),
        10,
        callbacks=[RayTrainReportCallback(checkpoint_at_end=False)],
    )
    text = booster.model_to_string().split("parameters:")[0]  # the trees (the params name each port)
    mine = torch.tensor(list(hashlib.sha256(text.encode()).digest()[:8]), dtype=torch.uint8)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    rows = torch.tensor([len(part)])
    dist.all_reduce(rows)
    return {
        "hashes": [bytes(t.tolist()).hex() for t in every],
        "machines": net["machines"],
        "rows": int(rows.item()),
    }


def test_every_rank_ends_with_the_same_model_over_the_node_ip(warm, tmp_path):
    from raynb.train.datasets import with_datasets
    from raynb.train.fit_run import execute_run

    train, _ = _frames()
    trainer = LightGBMTrainer(
        _hash_every_rank,
        train_loop_config={"params": PARAMS},
        datasets={"train": train},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
    )
    result, value = execute_run(
        with_datasets(trainer.train_loop_per_worker, trainer.datasets),
        trainer.train_loop_config,
        trainer.scaling_config,
        trainer.run_config,
    )
    assert value["rows"] == len(train)  # every row on exactly one rank
    assert len(set(value["hashes"])) == 1, value["hashes"]
    hosts = {m.split(":")[0] for m in value["machines"].split(",")}
    assert hosts == {"127.0.0.1"}, value["machines"]  # the node's IP, never a wildcard
    assert len(result.metrics_dataframe) == 10


def test_resume_from_checkpoint_boosts_on_to_num_boost_round(warm, tmp_path):
    first = _fit(tmp_path / "a", rounds=10)
    result = _fit(tmp_path / "b", rounds=25, resume_from_checkpoint=first.checkpoint)
    assert list(result.metrics_dataframe["epoch"]) == list(range(10, 25))
    assert LightGBMTrainer.get_model(result.checkpoint).current_iteration() == 25


def test_tune_merges_trial_params_into_the_trainers(warm, tmp_path):
    import json
    import os

    from raynb import tune

    train, valid = _frames()
    trainer = LightGBMTrainer(
        params=PARAMS,
        label_column="y",
        num_boost_round=10,
        datasets={"train": train, "valid": valid},
        scaling_config=ScalingConfig(num_workers=2),
    )
    grid = tune.Tuner(
        trainer,
        param_space={"params": {"learning_rate": tune.grid_search([0.001, 0.2])}},
        tune_config=tune.TuneConfig(metric="valid-binary_logloss", mode="min", max_concurrent_trials=1),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
    ).fit()
    assert sorted(r.config["params"]["learning_rate"] for r in grid) == [0.001, 0.2]
    best = grid.get_best_result()
    assert best.config["params"]["learning_rate"] == 0.2
    assert LightGBMTrainer.get_model(best.checkpoint).current_iteration() == 10
    with open(os.path.join(best.path, "params.json")) as f:
        params = json.load(f)["params"]
    assert params["objective"] == "binary" and params["learning_rate"] == 0.2


class _Predictor:
    """Loads the trained model once per worker; predicts a batch."""

    def __init__(self, model_path):
        self.booster = lightgbm.Booster(model_file=model_path)

    def __call__(self, batch):
        return batch.assign(p=self.booster.predict(batch.drop(columns=["y"])))


def test_batch_inference_with_the_checkpointed_model_through_map_batches(warm, tmp_path):
    import os

    import numpy as np

    import raynb.data

    result = _fit(tmp_path / "fit", rounds=10)
    model_path = os.path.join(result.checkpoint.path, RayTrainReportCallback.CHECKPOINT_NAME)
    _, valid = _frames()
    single = lightgbm.Booster(model_file=model_path).predict(valid.drop(columns="y"))
    out = raynb.data.from_pandas(valid).map_batches(
        _Predictor,
        batch_size=32,
        num_workers=2,
        batch_format="pandas",
        preserve_order=True,
        fn_constructor_kwargs={"model_path": model_path},
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path / "inf")),
    )
    np.testing.assert_allclose(out.to_pandas()["p"].to_numpy(), single, rtol=1e-6)


def test_bad_input_is_named_before_anything_ships(tmp_path):
    train, valid = _frames()
    with pytest.raises(ValueError, match="label_column='label' is not a column"):
        LightGBMTrainer(params=PARAMS, label_column="label", datasets={"train": train})
    with pytest.raises(ValueError, match="needs datasets="):
        LightGBMTrainer(params=PARAMS, label_column="y", datasets={"valid": valid})
    with pytest.raises(ValueError, match="num_boost_round=0"):
        LightGBMTrainer(params=PARAMS, label_column="y", num_boost_round=0, datasets={"train": train})
    with pytest.raises(ValueError, match="column 'name' has dtype"):
        LightGBMTrainer(params=PARAMS, label_column="y", datasets={"train": train.assign(name="x")})
    with pytest.raises(TypeError, match="not both"):
        LightGBMTrainer(lambda: None, params=PARAMS, label_column="y")


def test_get_network_params_outside_lightgbm_trainer_is_named(warm, tmp_path):
    from raynb.errors import RunError
    from raynb.train.torch import TorchTrainer

    def loop():
        from raynb.train.lightgbm import get_network_params

        get_network_params()

    with pytest.raises(RunError, match="use raynb.train.lightgbm.LightGBMTrainer"):
        TorchTrainer(
            loop,
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
        ).fit()


def test_without_lightgbm_the_error_names_the_extra():
    import subprocess

    code = (
        "import sys; sys.modules['lightgbm'] = None\n"
        "from raynb.train.lightgbm import LightGBMTrainer\n"
        "LightGBMTrainer(params={}, label_column='y', datasets={})"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and 'pip install "raynb[lightgbm]"' in out.stderr, out.stderr[-800:]
