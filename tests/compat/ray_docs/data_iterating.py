"""Ray Data's "Iterating over data" guide, written as a script.

Source: https://docs.ray.io/en/latest/data/iterating-over-data.html
(ray-project/ray doc/source/data/iterating-over-data.rst). Changed: iris and the images
are generated; the TensorFlow tab and the Ray-actor split (Ray core) are left out, the
split's shards read here instead.
"""

import numpy as np
import ray
import torch
from sklearn.datasets import load_iris

ds = ray.data.from_pandas(load_iris(as_frame=True).frame)

# Iterating over rows.
rows = 0
for row in ds.iter_rows():
    rows += 1
assert rows == 150 and set(row) >= {"sepal length (cm)", "target"}

# Iterating over batches: NumPy and pandas.
for batch in ds.iter_batches(batch_size=2, batch_format="numpy"):
    assert isinstance(batch["target"], np.ndarray) and len(batch["target"]) == 2
    break
for batch in ds.iter_batches(batch_size=2, batch_format="pandas"):
    assert list(batch.columns)[-1] == "target" and len(batch) == 2
    break

# Torch batches.
images = ray.data.from_numpy(np.zeros((10, 8, 8, 3), dtype=np.uint8))
for batch in images.iter_torch_batches(batch_size=2):
    assert isinstance(batch["data"], torch.Tensor) and tuple(batch["data"].shape) == (2, 8, 8, 3)
    break

# Iterating over batches with shuffling.
seen = []
for batch in ds.iter_batches(batch_size=2, batch_format="numpy", local_shuffle_buffer_size=250):
    seen.extend(batch["sepal length (cm)"].tolist())
assert sorted(seen) == sorted(ds.to_pandas()["sepal length (cm)"].tolist())

# Splitting a dataset for parallel consumers.
shards = ds.split(n=4, equal=True)
counts = [s.count() for s in shards]
assert sum(counts) >= 148 and len(set(counts)) == 1, counts
for shard in shards:
    for batch in shard.iter_batches(batch_size=8):
        pass

# Materialized datasets and take / take_batch / to_pandas.
print(ds.take(1))
print(ds.take_batch(5)["target"])
print(ds.to_pandas().shape)
