"""Ray Train's "Handling failures and node preemption" guide, written as a script.

Source: https://docs.ray.io/en/latest/train/user-guides/fault-tolerance.html
(ray-project/ray doc/source/train/user-guides/fault-tolerance.rst,
doc/source/train/doc_code/fault_tolerance.py). Changed: a worker failure is raised on
purpose once, so that the retry has something to recover; storage in a temporary folder.
"""

import os
import tempfile
import uuid

import ray.train
import ray.train.torch
import torch

storage = tempfile.mkdtemp()
marker = os.path.join(storage, "failed-once")

# Tries to recover a run up to this many times.
failure_config = ray.train.FailureConfig(max_failures=2)

# No limit on the number of retries.
failure_config = ray.train.FailureConfig(max_failures=-1)


def train_fn_per_worker(config: dict):
    model = torch.nn.Linear(8, 1)
    start_step = 0

    # [1] Train worker restoration logic.
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            state = torch.load(os.path.join(checkpoint_dir, "checkpoint.pt"))
            model.load_state_dict(state["model"])
            start_step = state["step"] + 1

    # [2] Checkpoint saving and reporting logic.
    for step in range(start_step, config["num_steps"]):
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            checkpoint = None
            if ray.train.get_context().get_world_rank() == 0:
                torch.save(
                    {"model": model.state_dict(), "step": step},
                    os.path.join(temp_checkpoint_dir, "checkpoint.pt"),
                )
                checkpoint = ray.train.Checkpoint.from_directory(temp_checkpoint_dir)
            ray.train.report({"step": step, "start_step": start_step}, checkpoint=checkpoint)
        if step == 2 and not os.path.exists(marker) and ray.train.get_context().get_world_rank() == 1:
            open(marker, "w").close()
            raise RuntimeError("a worker fails once")


trainer = ray.train.torch.TorchTrainer(
    train_fn_per_worker,
    train_loop_config={"num_steps": 5},
    scaling_config=ray.train.ScalingConfig(num_workers=2),
    run_config=ray.train.RunConfig(
        storage_path=storage,
        name=f"train_run-{uuid.uuid4().hex}",
        # [3] Enable worker-level fault tolerance to gracefully handle
        # Train worker failures.
        failure_config=ray.train.FailureConfig(max_failures=3),
    ),
)
result = trainer.fit()
assert result.error is None and result.metrics["step"] == 4, result.metrics
assert result.metrics["start_step"] > 0, result.metrics  # the retry resumed from a checkpoint
