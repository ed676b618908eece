"""TensorBoard: :class:`TBXLoggerCallback` writes each trial's reports as scalars and its
config as hparams into the trial's directory.

It is defined in ``raynb.tune.logger`` (Ray's ``ray.tune.logger.TBXLoggerCallback``: a
layer below this one may not import this package) and is the same class here.
"""

from ..tune.logger import TBXLoggerCallback, flatten, numbers_of

__all__ = ["TBXLoggerCallback", "flatten", "numbers_of"]
