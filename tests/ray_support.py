"""A real multi-node Ray cluster on this machine for the tests (``ray.cluster_utils.Cluster``:
one GCS, several raylets), in a temp dir of its own, and the check that nothing of it
(or of raynb on it) is left when it ends. Ray is never stopped by name (`ray stop`):
only the processes this test process started, by pid."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from contextlib import contextmanager

import psutil
from conftest import alive


def descendants() -> set[int]:
    try:
        return {p.pid for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()


def raynb_pids() -> set[int]:
    """This process's descendants that run raynb's processes (head, node agents,
    zygotes, workers: their command lines name raynb.cluster; forked workers share the
    zygote's)."""
    out = set()
    for pid in descendants():
        try:
            if any("raynb.cluster" in part for part in psutil.Process(pid).cmdline()):
                out.add(pid)
        except psutil.Error:
            pass
    return out


@contextmanager
def ray_cluster(head_cpus: int = 0, node_cpus=(2, 2)):
    """Yields ``(cluster, [worker nodes])``, the driver (this process) connected to it.

    RAY_TMPDIR points at a mkdtemp of ours (Ray's session files, sockets and its
    ``ray_current_cluster`` file go there, not to /tmp/ray), removed afterwards.
    """
    import ray
    from ray.cluster_utils import Cluster

    tmp = tempfile.mkdtemp(prefix="rre.")  # short: Ray's socket paths must stay < 108 bytes
    old_tmp = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = tmp
    cluster = None
    try:
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": head_cpus,
                "include_dashboard": False,
                "temp_dir": os.path.join(tmp, "ray"),
            },
        )
        nodes = [cluster.add_node(num_cpus=n) for n in node_cpus]
        ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
        cluster.wait_for_nodes()
        yield cluster, nodes
    finally:
        ours = descendants()
        try:
            ray.shutdown()
        finally:
            if cluster is not None:
                cluster.shutdown()
            deadline = time.monotonic() + 15
            while alive(ours) and time.monotonic() < deadline:
                time.sleep(0.1)
            left = alive(ours)
            for pid in left:  # by pid, only what this process started
                try:
                    psutil.Process(pid).kill()
                except psutil.Error:
                    pass
            if old_tmp is None:
                os.environ.pop("RAY_TMPDIR", None)
            else:
                os.environ["RAY_TMPDIR"] = old_tmp
            shutil.rmtree(tmp, ignore_errors=True)
        assert not left, f"Ray or raynb processes left behind: {left}"
