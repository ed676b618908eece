"""XGBoost on the warm pool (``ray.train.xgboost``): :class:`XGBoostTrainer` trains one
model over a run's ranks through ``xgboost.collective``; :class:`RayTrainReportCallback`
reports each boosting round and checkpoints the booster.

Importing this package does not import xgboost (its names say so when xgboost is missing).
"""
from .callback import RayTrainReportCallback
from .collective import communicator
from .trainer import XGBoostTrainer

__all__ = ["XGBoostTrainer", "RayTrainReportCallback", "communicator"]
