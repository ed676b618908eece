"""Distributed training (names as in ``ray.train``)."""
from .config import Result, RunConfig, ScalingConfig
from .session import TrainContext, get_checkpoint, get_context, report

__all__ = ["Result", "RunConfig", "ScalingConfig", "TrainContext", "get_checkpoint",
           "get_context", "report"]
