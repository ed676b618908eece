"""Ray Train's "Get started with XGBoost", written as a script.

Source: https://docs.ray.io/en/latest/train/getting-started-xgboost.html
(ray-project/ray doc/source/train/getting-started-xgboost.rst,
doc/source/train/doc_code/xgboost_quickstart.py). Changed: the S3 iris train / val CSV
folders are written here from scikit-learn's iris.
"""

import os
import tempfile

import ray.train
import xgboost
from ray.train.xgboost import RayTrainReportCallback, XGBoostTrainer
from sklearn.datasets import load_iris

tmp = tempfile.mkdtemp()
iris = load_iris(as_frame=True).frame.sample(frac=1.0, random_state=0)
for split, part in (("train", iris.iloc[:120]), ("val", iris.iloc[120:])):
    os.makedirs(os.path.join(tmp, split))
    part.to_csv(os.path.join(tmp, split, "1.csv"), index=False)

# 1. Load your data as a Ray Data Dataset.
train_dataset = ray.data.read_csv(os.path.join(tmp, "train"))
eval_dataset = ray.data.read_csv(os.path.join(tmp, "val"))


def train_func():
    # 2. Load your data shard as an `xgboost.DMatrix`.
    train_shard = ray.train.get_dataset_shard("train")
    eval_shard = ray.train.get_dataset_shard("eval")

    train_df = train_shard.materialize().to_pandas()
    eval_df = eval_shard.materialize().to_pandas()

    train_X = train_df.drop("target", axis=1)
    train_y = train_df["target"]
    eval_X = eval_df.drop("target", axis=1)
    eval_y = eval_df["target"]

    dtrain = xgboost.DMatrix(train_X, label=train_y)
    deval = xgboost.DMatrix(eval_X, label=eval_y)

    # 3. Define your xgboost model training parameters.
    params = {
        "tree_method": "approx",
        "objective": "reg:squarederror",
        "eta": 1e-4,
        "subsample": 0.5,
        "max_depth": 2,
    }

    # 4. Do distributed data-parallel training.
    xgboost.train(
        params,
        dtrain=dtrain,
        evals=[(deval, "validation")],
        num_boost_round=10,
        callbacks=[RayTrainReportCallback()],
    )


# 5. Configure scaling and resource requirements.
scaling_config = ray.train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2})

# 6. Launch distributed training job.
trainer = XGBoostTrainer(
    train_func,
    scaling_config=scaling_config,
    datasets={"train": train_dataset, "eval": eval_dataset},
)
result = trainer.fit()

# 7. Load the trained model
with result.checkpoint.as_directory() as checkpoint_dir:
    model_path = os.path.join(checkpoint_dir, RayTrainReportCallback.CHECKPOINT_NAME)
    model = xgboost.Booster()
    model.load_model(model_path)

assert result.metrics["training_iteration"] == 10, result.metrics
assert "validation-rmse" in result.metrics, result.metrics
