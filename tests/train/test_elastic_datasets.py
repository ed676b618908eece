"""An elastic run's ``datasets=`` are split again for each attempt's world size: at every
size, each epoch's shards hold every row exactly once (no row lost, none duplicated)."""

from __future__ import annotations

import json
import os

import numpy as np
from conftest import private_cluster

import raynb.data as rd
from raynb.train import FailureConfig, RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

ROWS = 240  # a multiple of 4 and 3: no shard is padded at either size


def _train(config):
    """Each epoch, each rank writes the row ids of its shard; rank 3 of the first attempt
    SIGKILLs itself at the start of epoch 2, once (the run then goes on at 3 ranks)."""
    import json
    import os
    import signal
    import tempfile
    import time

    import numpy as np

    from raynb.train import Checkpoint, get_checkpoint, get_context, get_dataset_shard, report

    ctx = get_context()
    rank, size = ctx.get_world_rank(), ctx.get_world_size()
    start = 0
    ck = get_checkpoint()
    if ck is not None:
        with ck.as_directory() as d, open(os.path.join(d, "state.json")) as f:
            start = json.load(f)["epoch"] + 1
    shard = get_dataset_shard("train")
    for epoch in range(start, config["epochs"]):
        if rank == 3 and epoch == 2 and not os.path.exists(config["flag"]):
            open(config["flag"], "w").close()
            time.sleep(0.5)  # the peers' reports of epoch 1 are in: its checkpoint is committed
            os.kill(os.getpid(), signal.SIGKILL)
        shard.set_epoch(epoch)
        ids = np.concatenate([b["id"] for b in shard.iter_batches(batch_size=32)]).tolist()
        with open(os.path.join(config["out"], f"{size}-{epoch}-{rank}.json"), "w") as f:
            json.dump(ids, f)
        with tempfile.TemporaryDirectory() as d:
            if rank == 0:
                with open(os.path.join(d, "state.json"), "w") as f:
                    json.dump({"epoch": epoch}, f)
            report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(d))


def test_datasets_are_split_again_for_each_world_size(tmp_path, monkeypatch):
    out = tmp_path / "shards"
    out.mkdir()
    ds = rd.from_numpy({"id": np.arange(ROWS), "x": np.zeros((ROWS, 4), dtype=np.float32)}).random_shuffle(
        seed=0
    )
    with private_cluster(tmp_path, monkeypatch, workers=3, max_workers=4):
        result = TorchTrainer(
            _train,
            train_loop_config={"epochs": 5, "flag": str(tmp_path / "killed"), "out": str(out)},
            datasets={"train": ds},
            scaling_config=ScalingConfig(num_workers=(1, 4)),
            run_config=RunConfig(
                verbose=0, storage_path=str(tmp_path / "r"), failure_config=FailureConfig(max_failures=1)
            ),
        ).fit()
    assert result.state == "FINISHED", result.error
    assert len(result.failures) == 1 and result.failures[0]["signal"] == "SIGKILL", result.failures
    shards: dict[tuple[int, int], dict[int, list]] = {}
    for name in os.listdir(out):
        size, epoch, rank = map(int, name[: -len(".json")].split("-"))
        shards.setdefault((size, epoch), {})[rank] = json.loads((out / name).read_text())
    resumed = min(epoch for size, epoch in shards if size == 3)
    assert resumed == 2, sorted(shards)  # from epoch 1's checkpoint, at 3 ranks
    whole = [(4, 0), (4, 1)] + [(3, e) for e in range(resumed, 5)]
    for key in whole:
        size, _ = key
        ranks = shards.get(key, {})
        assert sorted(ranks) == list(range(size)), (key, sorted(ranks))
        rows = sum(ranks.values(), [])
        assert sorted(rows) == list(range(ROWS)), (key, len(rows), len(set(rows)))  # each row once
        assert {len(r) for r in ranks.values()} == {ROWS // size}, key
    # shuffled per epoch: the order differs between epochs at the same size
    assert shards[(3, 3)][0] != shards[(3, 4)][0]
