"""Ray Train's "Saving and loading checkpoints" guide, written as a script.

Source: https://docs.ray.io/en/latest/train/user-guides/checkpoints.html
(ray-project/ray doc/source/train/user-guides/checkpoints.rst,
doc/source/train/doc_code/checkpoints.py). Changed: storage in a temporary folder
(the guide names s3://); the Lightning / Transformers tabs are left out.
"""

import os
import tempfile
from pathlib import Path

import numpy as np
import ray.train.torch
import torch
import torch.nn as nn
from ray import train
from ray.train import Checkpoint, ScalingConfig
from ray.train.torch import TorchTrainer
from torch.optim import Adam

storage = tempfile.mkdtemp()


def train_func(config):
    n = 100
    # create a toy dataset
    X = torch.Tensor(np.random.normal(0, 1, size=(n, 4)))
    Y = torch.Tensor(np.random.uniform(0, 1, size=(n, 1)))
    model = nn.Linear(4, 1)
    optimizer = Adam(model.parameters(), lr=3e-4)
    criterion = nn.MSELoss()

    # Wrap the model in DDP and move it to GPU.
    model = ray.train.torch.prepare_model(model)

    # ====== Resume training state from the checkpoint. ======
    start_epoch = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            model_state_dict = torch.load(os.path.join(checkpoint_dir, "model.pt"))
            model.module.load_state_dict(model_state_dict)
            optimizer.load_state_dict(torch.load(os.path.join(checkpoint_dir, "optimizer.pt")))
            start_epoch = torch.load(os.path.join(checkpoint_dir, "extra_state.pt"))["epoch"] + 1
    # ========================================================

    for epoch in range(start_epoch, config["num_epochs"]):
        y = model.forward(X)
        loss = criterion(y, Y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        metrics = {"loss": loss.item(), "epoch": epoch}

        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            checkpoint = None

            should_checkpoint = epoch % config.get("checkpoint_freq", 1) == 0
            # In standard DDP training, where the model is the same across all ranks,
            # only the global rank 0 worker needs to save and report the checkpoint
            if train.get_context().get_world_rank() == 0 and should_checkpoint:
                torch.save(model.module.state_dict(), os.path.join(temp_checkpoint_dir, "model.pt"))
                torch.save(optimizer.state_dict(), os.path.join(temp_checkpoint_dir, "optimizer.pt"))
                torch.save({"epoch": epoch}, os.path.join(temp_checkpoint_dir, "extra_state.pt"))
                checkpoint = Checkpoint.from_directory(temp_checkpoint_dir)

            train.report(metrics, checkpoint=checkpoint)

        if epoch == 1 and config.get("fail", False) and not train.get_checkpoint():
            raise RuntimeError("Intentional error to showcase restoration!")


# Save (rank 0) and restore after an intentional failure.
trainer = TorchTrainer(
    train_func,
    train_loop_config={"num_epochs": 5, "fail": True},
    scaling_config=ScalingConfig(num_workers=2),
    run_config=train.RunConfig(storage_path=storage, failure_config=train.FailureConfig(max_failures=1)),
)
result = trainer.fit()
assert result.error is None and result.metrics["epoch"] == 4, result.metrics

# Configure checkpointing: keep the two best by loss.
trainer = TorchTrainer(
    train_func,
    train_loop_config={"num_epochs": 4},
    scaling_config=ScalingConfig(num_workers=2),
    run_config=train.RunConfig(
        storage_path=storage,
        checkpoint_config=train.CheckpointConfig(
            num_to_keep=2,
            checkpoint_score_attribute="loss",
            checkpoint_score_order="min",
        ),
    ),
)
result = trainer.fit()
assert len(result.best_checkpoints) == 2, result.best_checkpoints
best = result.get_best_checkpoint(metric="loss", mode="min")
assert best is not None

# Resume a new run from the last run's checkpoint.
trainer = TorchTrainer(
    train_func,
    train_loop_config={"num_epochs": 6},
    scaling_config=ScalingConfig(num_workers=2),
    run_config=train.RunConfig(storage_path=storage),
    resume_from_checkpoint=result.checkpoint,
)
assert trainer.fit().metrics["epoch"] == 5


# Distributed checkpointing: every rank writes its own file into one checkpoint.
def train_func_sharded(config):
    with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
        rank = train.get_context().get_world_rank()
        torch.save({"rank": rank}, os.path.join(temp_checkpoint_dir, f"model-rank={rank}.pt"))
        checkpoint = Checkpoint.from_directory(temp_checkpoint_dir)
        train.report({"loss": 0.0}, checkpoint=checkpoint)


result = TorchTrainer(
    train_func_sharded,
    scaling_config=train.ScalingConfig(num_workers=2),
    run_config=train.RunConfig(storage_path=storage),
).fit()
with result.checkpoint.as_directory() as checkpoint_dir:
    assert sorted(os.listdir(checkpoint_dir)) == ["model-rank=0.pt", "model-rank=1.pt"], os.listdir(
        checkpoint_dir
    )


# Checkpoint upload modes (SYNC: before report returns; ASYNC: in the background).
def train_fn_upload(config):
    with tempfile.TemporaryDirectory() as tmpdir:
        torch.save({"w": 1}, os.path.join(tmpdir, "model.pt"))
        train.report(
            {"loss": 1.0},
            checkpoint=Checkpoint.from_directory(tmpdir),
            checkpoint_upload_mode=train.CheckpointUploadMode.SYNC,
        )
    tmpdir = tempfile.mkdtemp()
    torch.save({"w": 2}, os.path.join(tmpdir, "model.pt"))
    train.report(
        {"loss": 0.5},
        checkpoint=Checkpoint.from_directory(tmpdir),
        checkpoint_upload_mode=train.CheckpointUploadMode.ASYNC,
    )


result = TorchTrainer(
    train_fn_upload,
    scaling_config=ScalingConfig(num_workers=2),
    run_config=train.RunConfig(storage_path=storage),
).fit()
assert result.metrics["loss"] == 0.5 and "checkpoint_upload_mode" not in result.metrics
with result.checkpoint.as_directory() as checkpoint_dir:
    assert torch.load(os.path.join(checkpoint_dir, "model.pt"))["w"] == 2

# Inspect a checkpoint.
example_checkpoint_dir = Path(tempfile.mkdtemp()) / "test-checkpoint"
example_checkpoint_dir.mkdir()
example_checkpoint_dir.joinpath("model.pt").touch()
checkpoint = Checkpoint.from_directory(example_checkpoint_dir)
with checkpoint.as_directory() as checkpoint_dir:
    assert Path(checkpoint_dir).joinpath("model.pt").exists()
checkpoint_dir = checkpoint.to_directory()
assert Path(checkpoint_dir).joinpath("model.pt").exists()
