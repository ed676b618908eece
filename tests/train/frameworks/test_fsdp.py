"""prepare_model(parallel_strategy="fsdp") on 2 warm ranks: each rank holds about half of
every parameter (FSDP2 ``fully_shard``), the model trains, and a sharded checkpoint (each
rank's part, merged by raynb) saves and restores into a fresh run; a warm second fit is
faster than the first."""

from __future__ import annotations

import os
import sys
import time

import cloudpickle
import pytest

from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

pytestmark = pytest.mark.fsdp
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _model():
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(16, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 1),
    )


def _fsdp_loop(config):
    import tempfile

    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.tensor import DTensor

    import raynb.train as train
    from raynb.train import Checkpoint
    from raynb.train.torch import prepare_model

    rank = train.get_context().get_world_rank()
    torch.manual_seed(rank)  # different inits: prepare_model starts every rank from rank 0's
    model = prepare_model(_model(), parallel_strategy="fsdp")
    full = sum(p.numel() for p in model.parameters())
    local = sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in model.parameters())
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        state = get_model_state_dict(model)
        dcp.load(state, checkpoint_id=ckpt.path)
        set_model_state_dict(model, state)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own rows
    x = torch.randn(256, 16, generator=g)
    y = x[:, :1] * 2 - x[:, 1:2]
    losses = []
    for epoch in range(config["epochs"]):
        for i in range(0, 256, 32):
            loss = torch.nn.functional.mse_loss(model(x[i : i + 32]), y[i : i + 32])
            opt.zero_grad()
            loss.backward()
            opt.step()
        losses.append(loss.item())
        with tempfile.TemporaryDirectory() as tmp:
            dcp.save(get_model_state_dict(model), checkpoint_id=tmp)
            train.report({"epoch": epoch, "loss": loss.item()}, checkpoint=Checkpoint.from_directory(tmp))
    with torch.no_grad():
        probe = model(torch.ones(4, 16)).sum().item()
    return {"full": full, "local": local, "losses": losses, "probe": probe, "type": type(model).__name__}


def _run(tmp_path, epochs=3, workers=2, resume=None):
    from raynb.train import Checkpoint
    from raynb.train.fit_run import execute_run

    trainer = TorchTrainer(
        _fsdp_loop,
        train_loop_config={"epochs": epochs},
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
        resume_from_checkpoint=Checkpoint.from_directory(resume) if resume else None,
    )
    extra = {"resume_from_checkpoint": resume} if resume else None
    return execute_run(
        trainer.train_loop_per_worker,
        trainer.train_loop_config,
        trainer.scaling_config,
        trainer.run_config,
        **({"extra": extra} if extra else {}),
    )


def test_warm_second_fit_is_faster_than_the_first(warm, tmp_path):
    t0 = time.perf_counter()
    _run(tmp_path / "a", epochs=1, workers=4)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    _run(tmp_path / "b", epochs=1, workers=4)
    second = time.perf_counter() - t0
    assert second < first, (first, second)


def test_each_rank_holds_half_the_parameters_and_trains(warm, tmp_path):
    result, value = _run(tmp_path)
    assert value["type"].startswith("FSDP"), value["type"]
    assert abs(value["local"] - value["full"] / 2) <= 64, value  # dim-0 chunks: within a row each
    losses = list(result.metrics_dataframe["loss"])
    assert losses[-1] < losses[0], losses


def test_sharded_checkpoint_saves_and_restores(warm, tmp_path):
    result, value = _run(tmp_path / "a", epochs=2)
    files = sorted(os.listdir(result.checkpoint.path))
    assert ".metadata" in files and sum(f.endswith(".distcp") for f in files) == 2, files
    # A new run of 0 epochs loads it: the model computes what the first run's ended with.
    _, restored = _run(tmp_path / "b", epochs=0, resume=result.checkpoint.path)
    assert restored["probe"] == pytest.approx(value["probe"], rel=1e-6), (restored, value)
