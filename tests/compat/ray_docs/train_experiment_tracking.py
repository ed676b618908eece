"""Ray Train's "Experiment tracking" guide (MLflow and TensorBoard in the training
function), written as a script.

Source: https://docs.ray.io/en/latest/train/user-guides/experiment-tracking.html
(ray-project/ray doc/source/train/user-guides/experiment-tracking.rst,
doc/source/train/doc_code/torch_experiement_tracking.py). Changed: MLflow logs to a
file store in a temporary folder, TensorBoard to a temporary folder (no servers).
"""

import os
import tempfile

import mlflow

# This MLflow release refuses a new file store unless asked (Ray would meet the same).
os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
import ray
import torch
from ray import train
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer
from torch.utils.tensorboard import SummaryWriter

root = tempfile.mkdtemp()


def train_func(config):
    rank = train.get_context().get_world_rank()
    # Only the rank 0 worker logs.
    if rank == 0:
        mlflow.set_tracking_uri(config["tracking_uri"])
        mlflow.set_experiment("my_experiment")
        mlflow.start_run()
        writer = SummaryWriter(log_dir=config["tb_dir"])

    model = ray.train.torch.prepare_model(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        loss = model(torch.randn(16, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        metrics = {"loss": loss.item()}
        if rank == 0:
            mlflow.log_metrics(metrics, step=step)
            writer.add_scalar("loss", loss.item(), step)
        train.report(metrics)

    if rank == 0:
        mlflow.end_run()
        writer.close()


trainer = TorchTrainer(
    train_func,
    train_loop_config={
        "tracking_uri": "file://" + os.path.join(root, "mlruns"),
        "tb_dir": os.path.join(root, "tb"),
    },
    scaling_config=ScalingConfig(num_workers=2),
)
trainer.fit()

mlflow.set_tracking_uri("file://" + os.path.join(root, "mlruns"))
runs = mlflow.search_runs(experiment_names=["my_experiment"])
assert len(runs) == 1 and runs["metrics.loss"].notna().all(), runs
assert any(f.startswith("events.out.tfevents") for f in os.listdir(os.path.join(root, "tb")))
