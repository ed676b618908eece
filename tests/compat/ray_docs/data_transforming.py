"""Ray Data's "Transforming data" guide, written as a script.

Source: https://docs.ray.io/en/latest/data/transforming-data.html
(ray-project/ray doc/source/data/transforming-data.rst, doc/source/data/doc_code/transforming_data.py).
Changed: images and iris are generated (no S3 / example:// reads); the GPU tab is left out.
"""

import os
from typing import Any, Dict, Iterator, List

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pac
import ray
import torch
from ray.data import ActorPoolStrategy
from sklearn.datasets import load_iris

iris = ray.data.from_pandas(load_iris(as_frame=True).frame)
images = ray.data.from_items(
    [{"image": np.full((8, 8, 3), i, dtype=np.uint8), "path": f"/data/img_{i}.png"} for i in range(20)]
)


# Transforming rows with map.
def parse_filename(row: Dict[str, Any]) -> Dict[str, Any]:
    row["filename"] = os.path.basename(row["path"])
    return row


rows = images.map(parse_filename).take(2)
assert rows[1]["filename"] == "img_1.png", rows[1]


# Transforming rows with flat map.
def duplicate_row(row: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [row] * 2


print(ray.data.range(3).flat_map(duplicate_row).take_all())
assert ray.data.range(3).flat_map(duplicate_row).take_all() == [
    {"id": 0},
    {"id": 0},
    {"id": 1},
    {"id": 1},
    {"id": 2},
    {"id": 2},
]


# Transforming batches with tasks.
def increase_brightness(batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    batch["image"] = np.clip(batch["image"] + 4, 0, 255)
    return batch


out = images.map_batches(increase_brightness).take_batch(4)
assert out["image"].shape == (4, 8, 8, 3) and int(out["image"][1].max()) == 5


# Configuring batch format: pandas, pyarrow.
def drop_nas(batch: pd.DataFrame) -> pd.DataFrame:
    return batch.dropna()


assert iris.map_batches(drop_nas, batch_format="pandas").count() == 150


def pyarrow_transform(batch: pa.Table) -> pa.Table:
    batch = batch.append_column(
        "normalized.sepal.length",
        pac.divide(batch["sepal length (cm)"], pac.max(batch["sepal length (cm)"])),
    )
    return batch.drop(["sepal length (cm)"])


iris.map_batches(pyarrow_transform, batch_format="pyarrow").show(2)


# Generator functions.
def repeat_dataframe(df: pd.DataFrame) -> Iterator[pd.DataFrame]:
    for _ in range(5):
        yield pd.concat([df] * 20)


assert iris.limit(10).map_batches(repeat_dataframe, batch_format="pandas").count() == 1000


# Stateful transforms (a class; actors in Ray).
class TorchPredictor:
    def __init__(self):
        self.model = torch.nn.Identity()
        self.model.eval()

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        inputs = torch.as_tensor(batch["data"], dtype=torch.float32)
        with torch.inference_mode():
            batch["output"] = self.model(inputs).detach().numpy()
        return batch


ds = ray.data.from_numpy(np.ones((32, 100))).map_batches(TorchPredictor, concurrency=2)
ds = ds.materialize()
assert ds.count() == 32 and ds.take_batch(1)["output"].shape == (1, 100)
ds = ray.data.from_numpy(np.ones((32, 100))).map_batches(
    TorchPredictor, compute=ActorPoolStrategy(size=2), batch_size=8
)
assert ds.count() == 32

# Ordering of rows.
ctx = ray.data.DataContext.get_current()
ctx.execution_options.preserve_order = True
assert [r["id"] for r in ray.data.range(5).map(lambda r: r).take_all()] == [0, 1, 2, 3, 4]

# Shuffling, repartitioning, sorting.
ds = ray.data.range(100).random_shuffle()
assert sorted(r["id"] for r in ds.take_all()) == list(range(100))
assert ray.data.range(1000).repartition(10).materialize().count() == 1000
assert ray.data.range(10).sort("id", descending=True).take(1) == [{"id": 9}]

# Aggregations.
ds = ray.data.from_items([{"A": x % 3, "B": 2 * x, "C": 3 * x} for x in range(10)])
print(ds.groupby("A").mean(["B", "C"]).to_pandas())
assert ds.groupby("A").count().count() == 3
assert ds.mean(["B", "C"]) == {"mean(B)": 9.0, "mean(C)": 13.5}

# Transforming groups: NumPy and pandas.
items = [
    {"image": np.arange(12, dtype=np.float64).reshape(2, 2, 3), "label": label}
    for _ in range(3)
    for label in range(5)
]


def normalize_images(group: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    group["image"] = (group["image"] - group["image"].mean()) / group["image"].std()
    return group


ds = ray.data.from_items(items).groupby("label").map_groups(normalize_images)
assert ds.count() == 15


def normalize_features(group: pd.DataFrame) -> pd.DataFrame:
    target = group["target"]
    group = (group - group.min()) / group.std()
    group["target"] = target
    return group


ds = iris.groupby("target").map_groups(normalize_features, batch_format="pandas")
assert ds.count() == 150
