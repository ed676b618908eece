"""XGBoost on the warm pool (``ray.train.xgboost``): :class:`XGBoostTrainer` trains one
model over a run's ranks through ``xgboost.collective``; :class:`RayTrainReportCallback`
reports each boosting round and checkpoints the booster.

In a ``train_loop_per_worker``, :func:`shard_frame` gives this rank's rows of a
``datasets=`` entry as a DataFrame, each row on exactly one rank (``get_dataset_shard``
pads or drops rows to equal counts, which suits SGD, not a boosted model).

Importing this package imports xgboost when it is installed (the zygote preloads both);
without xgboost, using its classes raises an ImportError naming the extra to install.
"""

from ..framework_checkpoints import XGBoostCheckpoint
from .callback import RayTrainReportCallback
from .collective import communicator
from .config import XGBoostConfig
from .dmatrix import shard_frame
from .trainer import XGBoostTrainer

__all__ = [
    "XGBoostTrainer",
    "XGBoostCheckpoint",
    "XGBoostConfig",
    "RayTrainReportCallback",
    "communicator",
    "shard_frame",
]
