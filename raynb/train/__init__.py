"""Distributed training (names as in ``ray.train``)."""

from ..errors import RunError as TrainingFailedError  # what Ray 2.60's fit() raises: raynb's RunError
from . import batch_inference as _batch_inference  # noqa: F401,E402 - Dataset.map_batches(num_workers=N)
from .backend_config import BackendConfig, LoggingConfig
from .checkpoint import Checkpoint
from .config import CheckpointConfig, FailureConfig, Result, RunConfig, ScalingConfig
from .data_config import DataConfig
from .datasets import get_dataset_shard
from .preemption import PreemptionInfo, get_preemption_info
from .report_options import CheckpointConsistencyMode, CheckpointUploadMode
from .reported_checkpoints import ReportedCheckpoint, ReportedCheckpointStatus, get_all_reported_checkpoints
from .session import TrainContext, get_checkpoint, get_context, report
from .sync_config import SyncConfig
from .tracking import setup_mlflow
from .train_errors import ControllerError, NCCLHangError, PreemptionError, WorkerGroupError
from .user_callback import UserCallback
from .validation_config import ValidationConfig, ValidationFn, ValidationTaskConfig

TRAIN_DATASET_KEY = "train"  # Ray's name of the dataset its built-in trainers train on

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
    "BackendConfig",
    "CheckpointConsistencyMode",
    "ControllerError",
    "LoggingConfig",
    "NCCLHangError",
    "PreemptionError",
    "PreemptionInfo",
    "ReportedCheckpoint",
    "ReportedCheckpointStatus",
    "TRAIN_DATASET_KEY",
    "UserCallback",
    "ValidationConfig",
    "ValidationFn",
    "ValidationTaskConfig",
    "WorkerGroupError",
    "get_all_reported_checkpoints",
    "get_preemption_info",
]
