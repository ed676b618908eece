"""LightGBM on the warm pool (``ray.train.lightgbm``): :class:`LightGBMTrainer` trains one
model over a run's ranks through LightGBM's socket network (:func:`get_network_params`);
:class:`RayTrainReportCallback` reports each boosting round and checkpoints the booster.

Importing this package does not import lightgbm; building a ``LightGBMTrainer`` without it
raises an ImportError naming the extra (``pip install "raynb[lightgbm]"``).
"""

from ..framework_checkpoints import LightGBMCheckpoint
from .callback import RayTrainReportCallback
from .config import LightGBMConfig, normalize_pandas_for_lightgbm
from .data import shard_frame
from .network import get_network_params
from .trainer import LightGBMTrainer

__all__ = [
    "LightGBMTrainer",
    "LightGBMCheckpoint",
    "LightGBMConfig",
    "RayTrainReportCallback",
    "get_network_params",
    "normalize_pandas_for_lightgbm",
    "shard_frame",
]
