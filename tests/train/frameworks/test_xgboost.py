"""XGBoostTrainer on the real warm cluster: one model over 2 and 4 ranks through
xgboost's collective, the same log-loss as one process, identical boosters on every rank,
checkpoints, resume after a rank dies, and bad input named before anything ships."""

from __future__ import annotations

import hashlib
import os
import sys

import cloudpickle
import numpy as np
import pandas as pd
import pytest
from support.quick_benchmark import run_benchmark

xgboost = pytest.importorskip("xgboost")

from raynb.errors import RunError  # noqa: E402
from raynb.train import FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from raynb.train.xgboost import XGBoostTrainer  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

PARAMS = {
    "objective": "binary:logistic",
    "eval_metric": "logloss",
    "max_depth": 4,
    "eta": 0.3,
    "tree_method": "hist",
    "seed": 0,
}


def _frames(n=6000, d=12, seed=0):
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=n, n_features=d, n_informative=6, random_state=seed)
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(d)]).assign(y=y)
    cut = int(n * 0.8)
    return df.iloc[:cut].reset_index(drop=True), df.iloc[cut:].reset_index(drop=True)


def _single(train, valid, rounds):
    dtrain = xgboost.QuantileDMatrix(train.drop(columns="y"), label=train["y"])
    dvalid = xgboost.QuantileDMatrix(valid.drop(columns="y"), label=valid["y"], ref=dtrain)
    log = {}
    booster = xgboost.train(
        dict(PARAMS, nthread=1),
        dtrain,
        rounds,
        evals=[(dvalid, "valid")],
        evals_result=log,
        verbose_eval=False,
    )
    return booster, log["valid"]["logloss"][-1]


@pytest.mark.parametrize("workers,source", [(2, "parquet"), (4, "pandas")])
def test_distributed_logloss_matches_single_process(warm, workers, source, tmp_path):
    import raynb.data

    train, valid = _frames()
    _, single = _single(train, valid, 20)
    datasets = {"train": train, "valid": valid}
    if source == "parquet":  # row groups of 1000 rows: each rank reads its own
        for name, df in datasets.items():
            df.to_parquet(tmp_path / f"{name}.parquet", row_group_size=1000)
        datasets = {k: raynb.data.read_parquet(str(tmp_path / f"{k}.parquet")) for k in datasets}
    result = XGBoostTrainer(
        params=PARAMS,
        label_column="y",
        num_boost_round=20,
        datasets=datasets,
        checkpoint_frequency=10,
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
    ).fit()
    df = result.metrics_dataframe
    assert list(df["epoch"].drop_duplicates()) == list(range(20))
    assert {"train-logloss", "valid-logloss"} <= set(df.columns)
    assert result.metrics["valid-logloss"] == pytest.approx(single, rel=0.03, abs=0.005)
    booster = XGBoostTrainer.get_model(result.checkpoint)
    assert booster.num_boosted_rounds() == 20
    # the checkpointed model predicts the validation set as well as the reported log-loss says
    p = np.clip(booster.predict(xgboost.DMatrix(valid.drop(columns="y"))), 1e-7, 1 - 1e-7)
    logloss = -np.mean(valid["y"] * np.log(p) + (1 - valid["y"]) * np.log(1 - p))
    assert logloss == pytest.approx(result.metrics["valid-logloss"], rel=1e-3)
    assert len([c for c, _ in result.best_checkpoints]) == 2  # rounds 10 and 20


def _hash_every_rank(config):
    """Train inside the collective, then gather every rank's model bytes hash on rank 0."""
    import torch
    import torch.distributed as dist
    import xgboost

    import raynb.train as train
    from raynb.train.xgboost import RayTrainReportCallback, shard_frame

    world = train.get_context().get_world_size()
    part = shard_frame("train")  # this rank's rows, each row on one rank
    d = xgboost.QuantileDMatrix(part.drop(columns="y"), label=part["y"])
    b = xgboost.train(
        dict(config["params"], nthread=1),
        d,
        8,
        evals=[(d, "train")],
        callbacks=[RayTrainReportCallback(frequency=0, checkpoint_at_end=False)],
    )
    digest = hashlib.sha256(bytes(b.save_raw("ubj"))).digest()[:8]
    mine = torch.tensor(list(digest), dtype=torch.uint8)
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    import xgboost.collective as coll

    rows = torch.tensor([len(part)])
    dist.all_reduce(rows)
    return {
        "hashes": [bytes(t.tolist()).hex() for t in every],
        "xgb_rank": coll.get_rank(),
        "xgb_world": coll.get_world_size(),
        "rows": int(rows.item()),
    }


def test_every_rank_ends_with_the_same_booster(warm, tmp_path):
    train, _ = _frames(3750)
    train = train.iloc[:2999]  # rows that do not divide by 4
    trainer = XGBoostTrainer(
        _hash_every_rank,
        train_loop_config={"params": PARAMS},
        datasets={"train": train},
        scaling_config=ScalingConfig(num_workers=4),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
    )
    from raynb.train.datasets import with_datasets
    from raynb.train.fit_run import execute_run

    result, value = execute_run(
        with_datasets(trainer.train_loop_per_worker, trainer.datasets),
        trainer.train_loop_config,
        trainer.scaling_config,
        trainer.run_config,
    )
    assert value["xgb_world"] == 4 and value["xgb_rank"] == 0
    assert value["rows"] == 2999  # every row on exactly one rank
    assert len(set(value["hashes"])) == 1, value["hashes"]
    assert len(result.metrics_dataframe) == 8


def _dies_at_round_30(marker):
    class Die(xgboost.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            import raynb.train as train

            if epoch == 30 and train.get_context().get_world_rank() == 1 and not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(3)
            return False

    return Die()


def test_rank_killed_at_round_30_resumes_from_its_checkpoint(warm, tmp_path):
    train, valid = _frames(3000)
    marker = str(tmp_path / "died")
    result = XGBoostTrainer(
        params=PARAMS,
        label_column="y",
        num_boost_round=50,
        datasets={"train": train, "valid": valid},
        checkpoint_frequency=10,
        callbacks=[_dies_at_round_30(marker)],
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            verbose=0, storage_path=str(tmp_path), failure_config=FailureConfig(max_failures=1)
        ),
    ).fit()
    assert os.path.exists(marker) and len(result.failures) == 1
    epochs = list(result.metrics_dataframe["epoch"])
    restart = next(i for i in range(1, len(epochs)) if epochs[i] <= epochs[i - 1])
    assert 0 < epochs[restart] <= 30, str(epochs)  # resumed from a checkpoint (20 or 30), not round 0
    assert epochs[restart] % 10 == 0
    assert epochs[-1] == 49
    assert XGBoostTrainer.get_model(result.checkpoint).num_boosted_rounds() == 50
    assert "resuming from round" in result.logs(rank=0)


def test_bad_input_is_named_before_anything_ships(tmp_path):
    import raynb.data

    train, valid = _frames(200)
    train.assign(city="paris").to_parquet(tmp_path / "t.parquet")
    with pytest.raises(ValueError, match=r"column 'city' has dtype (string|large_string)"):
        XGBoostTrainer(
            params=PARAMS,
            label_column="y",
            datasets={"train": raynb.data.read_parquet(str(tmp_path / "t.parquet"))},
        )
    with pytest.raises(ValueError, match=r"label_column='label'.*columns are \['f0'"):
        XGBoostTrainer(
            params=PARAMS,
            label_column="label",
            datasets={"train": raynb.data.read_parquet(str(tmp_path / "t.parquet"))},
        )
    with pytest.raises(ValueError, match=r"label_column='label'.*columns are \['f0'"):
        XGBoostTrainer(params=PARAMS, label_column="label", datasets={"train": train})
    bad = train.assign(city="paris")
    with pytest.raises(ValueError, match=r"column 'city' has dtype (object|str)"):
        XGBoostTrainer(params=PARAMS, label_column="y", datasets={"train": bad})
    with pytest.raises(ValueError, match=r"num_boost_round=0.*>= 1"):
        XGBoostTrainer(params=PARAMS, label_column="y", num_boost_round=0, datasets={"train": train})
    with pytest.raises(ValueError, match=r"datasets=\{'train'"):
        XGBoostTrainer(params=PARAMS, label_column="y", datasets={"valid": valid})
    with pytest.raises(TypeError, match="either train_loop_per_worker"):
        XGBoostTrainer(lambda: None, params=PARAMS, label_column="y")


def test_a_parameter_xgboost_rejects_fails_with_its_message_and_rank(warm, tmp_path):
    train, _ = _frames(400)
    with pytest.raises(RunError) as e:
        XGBoostTrainer(
            params=dict(PARAMS, objective="binary:nope"),
            label_column="y",
            num_boost_round=3,
            datasets={"train": train},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
        ).fit()
    text = str(e.value)
    assert "binary:nope" in text and "rank" in text


class _SlowRounds(xgboost.callback.TrainingCallback):
    """Rounds of 50 ms, as on a real data set (here they take a few ms): a scheduler's stop
    then arrives while the trial is still boosting."""

    def after_iteration(self, model, epoch, evals_log):
        import time

        time.sleep(0.05)
        return False


def test_tune_with_asha_stops_poor_xgboost_trials_early(warm, tmp_path):
    from raynb import tune
    from raynb.tune.schedulers import ASHAScheduler

    train, valid = _frames(2000)
    trainer = XGBoostTrainer(
        params=PARAMS,
        label_column="y",
        num_boost_round=20,
        datasets={"train": train, "valid": valid},
        callbacks=[_SlowRounds()],
        scaling_config=ScalingConfig(num_workers=2),
    )
    etas = [0.3, 0.001, 0.25, 0.002]
    grid = tune.Tuner(
        trainer,
        param_space={"params": {"eta": tune.grid_search(etas), "max_depth": tune.randint(2, 5)}},
        tune_config=tune.TuneConfig(
            metric="valid-logloss",
            mode="min",
            max_concurrent_trials=1,
            scheduler=ASHAScheduler(max_t=20, grace_period=3, reduction_factor=2),
        ),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
    ).fit()
    by_eta = {r.config["params"]["eta"]: r for r in grid}
    assert sorted(by_eta) == sorted(etas)
    for eta in (0.001, 0.002):  # barely learning: stopped at the first rung
        assert by_eta[eta].state == "TERMINATED", (eta, by_eta[eta].state)  # Ray 2.60's
        assert by_eta[eta].metrics["training_iteration"] < 20
    assert by_eta[0.3].metrics["training_iteration"] >= 20
    best = grid.get_best_result()
    assert best.config["params"]["eta"] in (0.3, 0.25)
    assert XGBoostTrainer.get_model(best.checkpoint).num_boosted_rounds() == 20
    # the trial's params merged into the trainer's, the rest kept (the run's params.json)
    import json

    with open(os.path.join(best.path, "params.json")) as f:
        params = json.load(f)["params"]
    assert params["objective"] == "binary:logistic" and params["eta"] == best.config["params"]["eta"]


def test_benchmark_quick_prints_json_and_cleans_up(tmp_path):
    out = run_benchmark("xgboost_inference.py", tmp_path, "--skip-ray", timeout=300)
    train = out["train_per_round_ms"]
    assert all(train[k] > 0 for k in ("raynb_2_ranks", "single_process_2_threads", "single_process_1_thread"))
    first = out["first_round_s"]
    assert 0 < first["warm"] and 0 < first["cold_process"] and first["cold_cluster"] > first["warm"]
    assert out["xgboost_import_s"] > 0
    inf = out["inference_rows_per_s"]
    assert inf["rows"] == 20_000 and inf["raynb_map_batches_2_workers"] > 0 and inf["single_process"] > 0
    assert out["ray"] == "skipped (--skip-ray)" and out["machine"]["cpus"] >= 1


def test_the_zygote_has_xgboost_loaded_before_any_fork(warm):
    import psutil

    home = os.environ["RAYNB_HOME"]
    zygotes = []
    for p in psutil.process_iter():
        try:
            if (
                p.environ().get("RAYNB_HOME") == home
                and "raynb.cluster.node.zygote" in " ".join(p.cmdline())
                and "raynb.cluster.node.agent" in " ".join(p.parent().cmdline())
            ):
                zygotes.append(p)
        except psutil.Error:
            continue
    assert len(zygotes) == 1
    assert any("libxgboost" in m.path for m in zygotes[0].memory_maps())


def test_resume_from_checkpoint_boosts_on_to_num_boost_round(warm, tmp_path):
    train, valid = _frames(2000)
    common = dict(
        params=PARAMS,
        label_column="y",
        datasets={"train": train, "valid": valid},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
    )
    first = XGBoostTrainer(num_boost_round=10, **common).fit()
    more = XGBoostTrainer(num_boost_round=15, resume_from_checkpoint=first.checkpoint, **common).fit()
    assert list(more.metrics_dataframe["epoch"]) == list(range(10, 15))
    assert XGBoostTrainer.get_model(more.checkpoint).num_boosted_rounds() == 15
    assert more.metrics["valid-logloss"] < first.metrics["valid-logloss"]
