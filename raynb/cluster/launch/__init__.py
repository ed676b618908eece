"""How node agents and heads come to exist.

``local``: the embedded default, a head and one node agent on this machine,
started in the background (``raynb start``, ``raynb.connect()``). A node agent on
another machine is started by hand or by any launcher (ssh, Slurm ``srun``, a
Kubernetes pod) with ``raynb node --address tcp://HEAD:PORT``.
"""

from .local import (
    cluster_pids,
    ensure_local_cluster,
    running_cluster,
    start_cluster,
    stop_cluster,
    wait_for_workers,
)

__all__ = [
    "start_cluster",
    "stop_cluster",
    "running_cluster",
    "ensure_local_cluster",
    "cluster_pids",
    "wait_for_workers",
]
