"""``ray.air.config``: the run configuration classes (raynb.train's, with Ray's fields)."""

from ..train.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ..train.data_config import DataConfig
from ..train.sync_config import SyncConfig

__all__ = ["CheckpointConfig", "DataConfig", "FailureConfig", "RunConfig", "ScalingConfig", "SyncConfig"]
