"""Ray Data's "Loading data", "Inspecting data" and "Saving data" guides, written as a
script.

Sources: https://docs.ray.io/en/latest/data/loading-data.html,
https://docs.ray.io/en/latest/data/inspecting-data.html,
https://docs.ray.io/en/latest/data/saving-data.html
(ray-project/ray doc/source/data/{loading-data,inspecting-data,saving-data}.rst).
Changed: the S3 files are written here first from scikit-learn's iris; the cloud,
database and image readers are left out.
"""

import os
import tempfile

import numpy as np
import pandas as pd
import ray
from sklearn.datasets import load_iris

tmp = tempfile.mkdtemp()
iris = load_iris(as_frame=True).frame
iris.to_csv(os.path.join(tmp, "iris.csv"), index=False)
iris.to_parquet(os.path.join(tmp, "iris.parquet"))
iris.to_json(os.path.join(tmp, "iris.jsonl"), orient="records", lines=True)

# Reading files.
ds = ray.data.read_parquet(os.path.join(tmp, "iris.parquet"))
print(ds.schema())
assert ds.count() == 150
ds = ray.data.read_csv(os.path.join(tmp, "iris.csv"))
assert ds.count() == 150
ds = ray.data.read_json(os.path.join(tmp, "iris.jsonl"))
assert ds.count() == 150

# Loading data from other libraries and from Python objects.
ds = ray.data.from_items(
    [{"food": "spam", "price": 9.34}, {"food": "ham", "price": 5.37}, {"food": "eggs", "price": 0.94}]
)
print(ds)
ds = ray.data.from_numpy(np.ones((3, 2)))
assert ds.take_batch(3)["data"].shape == (3, 2)
ds = ray.data.from_pandas(pd.DataFrame({"food": ["spam", "ham", "eggs"], "price": [9.34, 5.37, 0.94]}))
ds = ray.data.range(10000)
assert ds.count() == 10000

# Inspecting data.
ds = ray.data.read_csv(os.path.join(tmp, "iris.csv"))
print(ds.columns())
print(ds.schema())
assert ds.columns() == list(iris.columns)
ds.show(limit=1)
print(ds.take(1))
batch = ds.take_batch(batch_size=2, batch_format="numpy")
assert len(batch["target"]) == 2
batch = ds.take_batch(batch_size=2, batch_format="pandas")
assert len(batch) == 2

# Saving data.
ds.write_parquet(os.path.join(tmp, "out_parquet"))
ds.repartition(2).write_csv(os.path.join(tmp, "out_csv"))
ds.write_json(os.path.join(tmp, "out_json"))
print(sorted(os.listdir(os.path.join(tmp, "out_csv"))))
assert len(os.listdir(os.path.join(tmp, "out_csv"))) == 2
assert ray.data.read_csv(os.path.join(tmp, "out_csv")).count() == 150
assert ray.data.read_json(os.path.join(tmp, "out_json")).count() == 150
assert ray.data.read_parquet(os.path.join(tmp, "out_parquet")).count() == 150

# Converting to pandas.
df = ds.to_pandas()
assert df.shape == (150, 5)
