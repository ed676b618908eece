"""Ray Data's key concepts (datasets, lazy plans, Ray Data inside Tune trials), written
as a script.

Sources: https://docs.ray.io/en/latest/data/key-concepts.html
(ray-project/ray doc/source/data/key-concepts.rst) and its resource-allocation example
(doc/source/data/doc_code/key_concepts.py).
"""

import ray
from ray import tune


# This workload will use spare cluster resources for execution.
def objective(*args):
    ray.data.range(10).show()
    tune.report({"rows": ray.data.range(10).count()})


# Create a cluster with 4 CPU slots available.
ray.init(num_cpus=4, ignore_reinit_error=True)

# By setting `max_concurrent_trials=3`, this ensures the cluster will always
# have a sparse CPU for Dataset.
tuner = tune.Tuner(
    tune.with_resources(objective, {"cpu": 1}),
    tune_config=tune.TuneConfig(num_samples=1, max_concurrent_trials=3),
)
results = tuner.fit()
assert results[0].metrics["rows"] == 10, results[0].metrics

# Datasets are lazy: transformations run when the data is consumed.
ds = ray.data.range(100).map_batches(lambda batch: {"id": batch["id"] * 2})
print(ds)
ds = ds.materialize()
print(ds)
assert ds.sum("id") == 9900
