"""Ray Train's "Data loading and preprocessing" guide, written as a script.

Source: https://docs.ray.io/en/latest/train/user-guides/data-loading-preprocessing.html
(ray-project/ray doc/source/train/user-guides/data-loading-preprocessing.rst,
doc/source/train/doc_code/data_ingest_torch_new.py). Changed: the S3 iris / text /
csv files are generated; epochs shortened.
"""

from typing import Dict

import numpy as np
import ray
import torch
from ray import train
from ray.train import DataConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from sklearn.datasets import load_iris

# Set this to True to use GPU.
use_gpu = False

# Step 1: Create a Ray Dataset from in-memory Python lists.
train_dataset = ray.data.from_items([{"x": [x], "y": [2 * x]} for x in range(200)])


# Step 2: Preprocess your Ray Dataset.
def increment(batch):
    batch["y"] = batch["y"] + 1
    return batch


train_dataset = train_dataset.map_batches(increment)


def train_func():
    batch_size = 16

    # Step 4: Access the dataset shard for the training worker via
    # ``get_dataset_shard``.
    train_data_shard = train.get_dataset_shard("train")
    # `iter_torch_batches` returns an iterable object that
    # yield tensor batches. Ray Data automatically moves the Tensor batches
    # to GPU if you enable GPU training.
    train_dataloader = train_data_shard.iter_torch_batches(batch_size=batch_size, dtypes=torch.float32)

    for epoch_idx in range(1):
        for batch in train_dataloader:
            inputs, labels = batch["x"], batch["y"]
            assert type(inputs) is torch.Tensor
            assert type(labels) is torch.Tensor
            assert inputs.shape[0] == batch_size
            assert labels.shape[0] == batch_size
            assert bool((labels == 2 * inputs + 1).all())
            # Only check one batch for demo purposes.
            # Replace the above with your actual model training code.
            break


# Step 3: Create a TorchTrainer. Specify the number of training workers and
# pass in your Ray Dataset.
# The Ray Dataset is automatically split across all training workers.
trainer = TorchTrainer(
    train_func,
    datasets={"train": train_dataset},
    scaling_config=ScalingConfig(num_workers=2, use_gpu=use_gpu),
)
result = trainer.fit()

# Preprocessing, shuffling and the per-worker loop (doc_code/data_ingest_torch_new.py).
iris = load_iris(as_frame=True).frame.rename(columns={"sepal length (cm)": "sepal.length"})
train_ds = ray.data.from_pandas(iris)
## Uncomment to randomize the block order each epoch.
train_ds = train_ds.randomize_block_order()


def normalize_length(batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    new_col = batch["sepal.length"] / np.max(batch["sepal.length"])
    batch["normalized.sepal.length"] = new_col
    del batch["sepal.length"]
    return batch


train_ds = train_ds.map_batches(normalize_length)
# Materialize once; per-epoch augmentation goes after the materialize call.
train_ds = train_ds.materialize()
train_ds = train_ds.map_batches(lambda batch: batch)


def train_loop_per_worker():
    it = train.get_dataset_shard("train")
    seen = 0
    for _ in range(2):
        for batch in it.iter_batches(local_shuffle_buffer_size=100, batch_size=16, prefetch_batches=2):
            assert "normalized.sepal.length" in batch and "sepal.length" not in batch
            seen += len(batch["target"])
    train.report({"rows": seen})


dataset_b = ray.data.from_items([{"text": f"message {i}"} for i in range(30)])
options = DataConfig.default_ingest_options()
options.resource_limits.object_store_memory = 10e9
my_trainer = TorchTrainer(
    train_loop_per_worker,
    scaling_config=ScalingConfig(num_workers=2),
    datasets={"train": train_ds, "b": dataset_b},
    dataset_config=ray.train.DataConfig(datasets_to_split=["train"], execution_options=options),
)
result = my_trainer.fit()
assert result.metrics["rows"] == 150, result.metrics  # 75 rows a worker, 2 epochs


# Preprocessing structured data: fit a scaler on the training data, concatenate the
# features into one tensor column, read it as torch batches on each worker.
from ray.data.preprocessors import Concatenator, StandardScaler  # noqa: E402

frame = load_iris(as_frame=True).frame
train_dataset = ray.data.from_pandas(frame)
feature_columns = [c for c in frame.columns if c != "target"]
preprocessor = StandardScaler(columns=feature_columns)
train_dataset = preprocessor.fit_transform(train_dataset)
concatenator = Concatenator(columns=feature_columns, output_column_name="features", dtype=np.float32)
train_dataset = concatenator.transform(train_dataset)


def train_loop_features():
    shard = train.get_dataset_shard("train")
    for batch in shard.iter_torch_batches(
        batch_size=25, dtypes={"features": torch.float32, "target": torch.int64}
    ):
        assert batch["features"].shape[1] == 4 and batch["features"].dtype == torch.float32
    train.report({"mean": float(batch["features"].mean())})


result = TorchTrainer(
    train_loop_features, scaling_config=ScalingConfig(num_workers=2), datasets={"train": train_dataset}
).fit()
assert abs(result.metrics["mean"]) < 2.0, result.metrics
