"""raynb: distributed PyTorch training as an ordinary notebook cell.

A warm local cluster (head, node agent, forked workers with torch preloaded),
the ``%%ray_train`` magic, and a Ray Train-style API::

    import raynb
    from raynb.train.torch import TorchTrainer
    result = TorchTrainer(train_fn, scaling_config=raynb.ScalingConfig(num_workers=4)).fit()
"""
from .client import connect, disconnect
from .cluster import cluster_status
from .errors import ClusterError, RunError
from .shipping import UnpicklableError
from .runs import attach, get_run, runs
from .train import (Checkpoint, CheckpointConfig, FailureConfig, Result, RunConfig, ScalingConfig,
                    get_checkpoint, get_context, report)
from .train.torch import TorchTrainer, get_device, prepare_data_loader, prepare_model

__version__ = "0.1.0"

__all__ = ["connect", "disconnect", "ClusterError", "RunError", "UnpicklableError", "Result",
           "RunConfig", "ScalingConfig", "Checkpoint", "CheckpointConfig", "FailureConfig",
           "runs", "get_run", "attach", "cluster_status", "get_checkpoint", "get_context", "report",
           "TorchTrainer", "get_device", "prepare_data_loader", "prepare_model",
           "load_ipython_extension"]


def load_ipython_extension(ipython) -> None:
    """``%load_ext raynb``: registers ``%%ray_train`` and ``%ray_cluster``."""
    from .magics import load_ipython_extension as _load

    _load(ipython)
