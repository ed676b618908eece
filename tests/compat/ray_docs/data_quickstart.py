"""Ray Data basics (quick start), written as a script.

Source: https://docs.ray.io/en/latest/data/quickstart.html
(ray-project/ray doc/source/data/quickstart.rst). Changed: the S3 iris.csv is written
from scikit-learn's bundled iris data (same columns); outputs go to a temporary folder.
"""

import os
import tempfile
from typing import Dict

import numpy as np
import ray
from sklearn.datasets import load_iris

tmp = tempfile.mkdtemp()
iris = load_iris(as_frame=True).frame
iris.to_csv(os.path.join(tmp, "iris.csv"), index=False)

# Load data to create a Dataset.
ds = ray.data.read_csv(os.path.join(tmp, "iris.csv"))
ds.show(limit=1)


# Transform data.
def transform_batch(batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    vec_a = batch["petal length (cm)"]
    vec_b = batch["petal width (cm)"]
    batch["petal area (cm^2)"] = vec_a * vec_b
    return batch


transformed_ds = ds.map_batches(transform_batch)
print(transformed_ds.materialize())
assert transformed_ds.count() == 150
assert "petal area (cm^2)" in transformed_ds.schema().names

# Consume data.
batch = transformed_ds.take_batch(batch_size=3)
print(batch)
assert len(batch["petal area (cm^2)"]) == 3
for b in transformed_ds.iter_batches(batch_size=50):
    assert len(b["target"]) == 50

# Save data.
transformed_ds = transformed_ds.repartition(2)
transformed_ds.write_parquet(os.path.join(tmp, "iris"))
print(os.listdir(os.path.join(tmp, "iris")))
assert len([f for f in os.listdir(os.path.join(tmp, "iris")) if f.endswith(".parquet")]) == 2
assert ray.data.read_parquet(os.path.join(tmp, "iris")).count() == 150
