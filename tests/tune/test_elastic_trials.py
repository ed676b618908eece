"""Tune trials whose trainer is elastic (``TorchTrainer`` with ``num_workers=(min, max)``
as the trainable) grow into the room that ended trials leave."""

from __future__ import annotations

import sys

import cloudpickle
from conftest import private_cluster

from raynb import tune
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _train(config):
    """``epochs`` epochs of ``sleep`` s, a checkpoint each, resumed from get_checkpoint()."""
    import json
    import os
    import tempfile
    import time

    import torch
    import torch.distributed as dist

    from raynb.train import Checkpoint, get_checkpoint, get_context, report

    ctx = get_context()
    t = torch.ones(1)
    dist.all_reduce(t)
    start = 0
    ck = get_checkpoint()
    if ck is not None:
        with ck.as_directory() as d, open(os.path.join(d, "s.json")) as f:
            start = json.load(f)["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        time.sleep(0.25)
        with tempfile.TemporaryDirectory() as d:
            if ctx.get_world_rank() == 0:
                with open(os.path.join(d, "s.json"), "w") as f:
                    json.dump({"epoch": epoch}, f)
            report({"epoch": epoch, "world": t.item()}, checkpoint=Checkpoint.from_directory(d))


def test_an_elastic_trial_grows_when_another_trial_ends(tmp_path, monkeypatch):
    """Two trials of (1, 2) on 3 workers: the first gets 2, the second the 1 left. When the
    short first trial ends, the second grows to 2 ranks from its checkpoint."""
    with private_cluster(tmp_path, monkeypatch, workers=3, max_workers=3):
        trainer = TorchTrainer(
            _train,
            scaling_config=ScalingConfig(num_workers=(1, 2), elastic_resize_monitor_interval_s=0.5),
        )
        grid = tune.Tuner(
            trainer,
            param_space={"train_loop_config": {"epochs": tune.grid_search([3, 24])}},
            tune_config=tune.TuneConfig(max_concurrent_trials=2),
            run_config=RunConfig(verbose=0, storage_path=str(tmp_path / "r")),
        ).fit()
    results = sorted(grid, key=lambda r: len(r.metrics_dataframe))
    assert all(r.error is None for r in results), [r.error for r in results]
    short, long = (r.metrics_dataframe.to_dict("records") for r in results)
    assert {int(r["world_size"]) for r in short} == {2}, short
    sizes = [int(r["world_size"]) for r in long]
    assert sizes[0] == 1 and sizes[-1] == 2 and sizes == sorted(sizes), sizes
    assert all(r["world"] == r["world_size"] for r in long), long
    assert [int(r["epoch"]) for r in long] == list(range(24)), long  # stopped at a checkpoint
    assert not results[1].failures
