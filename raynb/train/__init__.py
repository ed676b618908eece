"""Distributed training (names as in ``ray.train``)."""

from ..errors import RunError as TrainingFailedError  # what Ray 2.60's fit() raises: raynb's RunError
from . import batch_inference as _batch_inference  # noqa: F401,E402 - Dataset.map_batches(num_workers=N)
from .checkpoint import Checkpoint
from .config import CheckpointConfig, FailureConfig, Result, RunConfig, ScalingConfig
from .data_config import DataConfig
from .datasets import get_dataset_shard
from .report_options import CheckpointUploadMode
from .session import TrainContext, get_checkpoint, get_context, report
from .sync_config import SyncConfig
from .tracking import setup_mlflow

__all__ = [
    "CheckpointUploadMode",
    "Checkpoint",
    "CheckpointConfig",
    "DataConfig",
    "SyncConfig",
    "TrainingFailedError",
    "FailureConfig",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "TrainContext",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "report",
    "setup_mlflow",
]
