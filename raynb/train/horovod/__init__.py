"""Horovod on the warm pool (``ray.train.horovod``): :class:`HorovodTrainer` runs a Horovod
training function on a run's ranks, with Horovod's PyTorch API (:mod:`raynb.train.horovod.torch`)
served over raynb's torch.distributed group when the real Horovod is not installed.
"""
from .trainer import HorovodConfig, HorovodTrainer

__all__ = ["HorovodTrainer", "HorovodConfig"]
