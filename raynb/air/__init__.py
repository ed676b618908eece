"""Ray AIR's names (``ray.air``), which older Ray Train / Tune scripts import:
``from raynb.air import ScalingConfig, RunConfig`` and ``raynb.air.config``,
``raynb.air.session``, ``raynb.air.integrations``. The classes are raynb.train's.
"""

from ..train.checkpoint import Checkpoint
from ..train.config import CheckpointConfig, FailureConfig, Result, RunConfig, ScalingConfig
from ..train.data_config import DataConfig
from . import config, session  # noqa: F401

__all__ = [
    "Checkpoint",
    "CheckpointConfig",
    "DataConfig",
    "FailureConfig",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "config",
    "session",
]
