"""raynb: distributed PyTorch training as an ordinary notebook cell.

A warm local cluster (head, node agent, forked workers with torch preloaded),
the ``%%ray_train`` magic, and a Ray Train-style API::

    import raynb
    from raynb.train.torch import TorchTrainer
    result = TorchTrainer(train_fn, scaling_config=raynb.ScalingConfig(num_workers=4)).fit()

The package is layered by process (see CONTRIBUTING.md): ``raynb.cluster`` (head,
node agent, zygote, workers), ``raynb.client`` (the notebook-side connection),
``raynb.train`` and ``raynb.tune`` (Ray's API), ``raynb.notebook`` (magics and views).
"""

from . import data  # noqa: F401 - raynb.data.from_numpy(...), read_parquet(...)
from . import notebook as _notebook  # registers the progress views (raynb.client.views)
from .client.connection import cluster_status, connect, disconnect
from .client.ray_init import init, is_initialized, shutdown
from .client.runs import runs
from .client.shipping import UnpicklableError
from .errors import ClusterError, RunError
from .train import (
    Checkpoint,
    CheckpointConfig,
    FailureConfig,
    Result,
    RunConfig,
    ScalingConfig,
    get_checkpoint,
    get_context,
    get_dataset_shard,
    report,
)
from .train.fit_run import attach, get_run
from .train.torch import TorchTrainer, get_device, prepare_data_loader, prepare_model

__version__ = "0.1.0"

__all__ = [
    "connect",
    "disconnect",
    "init",
    "shutdown",
    "is_initialized",
    "ClusterError",
    "RunError",
    "UnpicklableError",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "Checkpoint",
    "CheckpointConfig",
    "FailureConfig",
    "runs",
    "get_run",
    "attach",
    "cluster_status",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "report",
    "data",
    "TorchTrainer",
    "get_device",
    "prepare_data_loader",
    "prepare_model",
    "load_ipython_extension",
]


def load_ipython_extension(ipython) -> None:
    """``%load_ext raynb``: registers ``%%ray_train``, ``%%ray_tune``, ``%ray_cluster``
    and ``%ray_attach``."""
    _notebook.load_ipython_extension(ipython)


def _jupyter_server_extension_points() -> list[dict]:
    """``jupyter server extension enable raynb``: the cluster dashboard at ``<base_url>raynb/``."""
    from .notebook.dashboard import _jupyter_server_extension_points as points

    return points()
