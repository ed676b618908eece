"""Tune utilities (``ray.tune.utils``): ``mock_trainable.MyTrainableClass``,
``validate_save_restore``."""

from .util import validate_save_restore

__all__ = ["validate_save_restore"]
