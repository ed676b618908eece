"""Ray Train's "Monitoring and logging metrics" guide, written as a script.

Source: https://docs.ray.io/en/latest/train/user-guides/monitoring-logging.html
(ray-project/ray doc/source/train/user-guides/monitoring-logging.rst,
doc/source/train/doc_code/metric_logging.py). Unchanged but for the epoch count.
"""

import os
import tempfile

import numpy as np
import ray.train.torch
import torch
import torch.nn as nn
import torchmetrics
from ray import train
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer
from torch.optim import Adam


def train_func(config):
    n = 100
    # create a toy dataset
    X = torch.Tensor(np.random.normal(0, 1, size=(n, 4)))
    X_valid = torch.Tensor(np.random.normal(0, 1, size=(n, 4)))
    Y = torch.Tensor(np.random.uniform(0, 1, size=(n, 1)))
    Y_valid = torch.Tensor(np.random.uniform(0, 1, size=(n, 1)))
    # toy neural network : 1-layer
    # wrap the model in DDP
    model = ray.train.torch.prepare_model(nn.Linear(4, 1))
    criterion = nn.MSELoss()

    mape = torchmetrics.MeanAbsolutePercentageError()
    # for averaging loss
    mean_valid_loss = torchmetrics.MeanMetric()

    optimizer = Adam(model.parameters(), lr=3e-4)
    for epoch in range(config["num_epochs"]):
        model.train()
        y = model.forward(X)
        loss = criterion(y, Y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        # evaluate
        model.eval()
        with torch.no_grad():
            pred = model(X_valid)
            valid_loss = criterion(pred, Y_valid)
            # save loss in aggregator
            mean_valid_loss(valid_loss)
            mape(pred, Y_valid)

        # collect all metrics
        # use .item() to obtain a value that can be reported
        valid_loss = valid_loss.item()
        mape_collected = mape.compute().item()
        mean_valid_loss_collected = mean_valid_loss.compute().item()

        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            torch.save(model.state_dict(), os.path.join(temp_checkpoint_dir, "model.pt"))
            train.report(
                {
                    "mape_collected": mape_collected,
                    "valid_loss": valid_loss,
                    "mean_valid_loss_collected": mean_valid_loss_collected,
                },
                checkpoint=train.Checkpoint.from_directory(temp_checkpoint_dir),
            )

        # reset for next epoch
        mape.reset()
        mean_valid_loss.reset()


trainer = TorchTrainer(
    train_func,
    train_loop_config={"num_epochs": 5},
    scaling_config=ScalingConfig(num_workers=2),
)
result = trainer.fit()
print(result.metrics["valid_loss"], result.metrics["mean_valid_loss_collected"])
assert len(result.metrics_dataframe) == 5, result.metrics_dataframe
assert result.metrics["training_iteration"] == 5


# Metrics from rank 0 only; the other ranks report too (every rank calls report).
def train_func_rank0():
    for i in range(3):
        metrics = {"epoch": i} if train.get_context().get_world_rank() == 0 else {}
        train.report(metrics)


result = TorchTrainer(train_func_rank0, scaling_config=ScalingConfig(num_workers=2)).fit()
assert result.metrics["epoch"] == 2, result.metrics
