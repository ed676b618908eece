"""What a node agent needs to know of its host: the IP it registers, its GPUs and
cores, and its private directories (rendezvous files, the workers' temp dirs)."""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import tempfile

import psutil

from ..connection_file import private_dir


def _local_ip_for(address: str) -> str:
    """The IP of this host's interface that routes to the head (for MASTER_ADDR, and
    what this node's workers listen on: see ``rendezvous``)."""
    host = address.split("//", 1)[-1].rsplit(":", 1)[0].strip("[]")
    if host in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1"
    if host in ("*", "0.0.0.0", "::"):
        # A head on every interface of this machine: the other nodes reach this one by
        # the address of its default route (loopback would send them to themselves).
        host = "192.0.2.1"  # TEST-NET-1: only the route is looked up
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((host, 9))  # no packet is sent for a UDP connect
        return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"  # no route: this machine alone
    finally:
        s.close()


def visible_gpus() -> list[int]:
    """CUDA device indices this node's workers may use, found without initializing CUDA
    (the zygote must fork before any CUDA context exists)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        n = len([d for d in env.split(",") if d.strip() and d.strip() != "-1"])
    else:
        try:
            n = len(os.listdir("/proc/driver/nvidia/gpus"))
        except OSError:
            n = 0
    return list(range(n))


def _agent_dir(kind: str, node_id: str) -> str:
    """``$RAYNB_HOME/<kind>/<node id>-<pid>``, private to this agent and removed when it
    exits. An agent that was SIGKILLed cannot remove its own: each new agent removes
    those whose agent's pid is gone."""
    root = private_dir(kind)
    for old in root.iterdir():
        pid = old.name.rpartition("-")[2]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    path = root / f"{node_id}-{os.getpid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return str(path)


def _rendezvous_dir(node_id: str) -> str:
    """The workers' FileStore rendezvous files (single-node process groups). torch
    deletes such a file only when every rank dropped its reference, which a killed
    worker, or one that exits with the cluster (os._exit), never does."""
    return _agent_dir("rdzv", node_id)


WORKERS_TMP_PREFIX = "raynb-w-"


def _workers_tmp_dir(node_id: str) -> str:
    """Each worker's TMPDIR is ``<this>/<worker id>``, removed when the worker exits: the
    temporary files of a training function that was killed (or that forgot them) do not
    stay in /tmp for good. It sits in the system's temp dir, not under RAYNB_HOME: Unix
    sockets made there (torch's shared-memory manager, multiprocessing's listeners) need
    a path under 108 bytes. Those of agents whose pid is gone (SIGKILLed) are removed."""
    remove_stale_workers_tmp()
    return tempfile.mkdtemp(prefix=f"{WORKERS_TMP_PREFIX}{os.getpid()}-")  # 0700


def remove_stale_workers_tmp() -> list[str]:
    """Remove this user's workers' temp dirs (in the system's temp dir) whose node agent's
    pid is gone: a SIGKILLed agent cannot remove its own. Returns the paths removed."""
    root, removed = tempfile.gettempdir(), []
    for old in os.listdir(root):
        pid = old[len(WORKERS_TMP_PREFIX):].partition("-")[0]
        if old.startswith(WORKERS_TMP_PREFIX) and pid.isdigit() and not psutil.pid_exists(int(pid)):
            path = os.path.join(root, old)
            try:
                if os.lstat(path).st_uid == os.getuid():
                    shutil.rmtree(path, ignore_errors=True)
                    if not os.path.lexists(path):
                        removed.append(path)
            except OSError:
                pass
    return removed


def node_cpus() -> int:
    """The cores this node's workers may run on (its CPU affinity, else all of them)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_max_workers() -> int:
    return max(16, 4 * (os.cpu_count() or 1))


def parse_args(argv=None):
    """``python -m raynb.cluster.node.agent``'s command line."""
    ap = argparse.ArgumentParser(prog="raynb node", description="Run a raynb node agent.")
    ap.add_argument("--address", required=True, help="the head's address, tcp://HOST:PORT")
    ap.add_argument("--workers", type=int, default=0, help="workers to keep warm on this node")
    ap.add_argument("--max-workers", type=int, default=default_max_workers())
    ap.add_argument("--node-id", default=None)
    ap.add_argument("--die-with-parent", action="store_true")
    ap.add_argument("--head-pid", type=int, default=None,
                    help="the head's pid, when it runs on this machine: its workers are never ended "
                         "while it lives (head_watch)")
    ap.add_argument("--cpus", type=int, default=None, help="cores reported to the head")
    ap.add_argument("--label", action="append", default=[], metavar="NAME=VALUE",
                    help="shown by `raynb status` (repeatable)")
    ap.add_argument("--note", default=None, help="shown by `raynb status` for this node")
    return ap.parse_args(argv)


def check_worker_limit(num_workers: int, max_workers: int | None) -> None:
    """Refuse a warm worker count above the node's limit at once: the agent would fork
    only ``max_workers`` of them, and a start would then wait its whole timeout for the rest.

    Raises:
        ValueError: ``num_workers`` exceeds ``max_workers`` (None: :func:`default_max_workers`),
            naming the limit, where it comes from, and ``--max-workers``.
    """
    limit = max_workers or default_max_workers()
    if num_workers > limit:
        where = (f"--max-workers {max_workers}" if max_workers else
                 f"its default, the larger of 16 and 4 x its {os.cpu_count() or 1} cores")
        raise ValueError(f"--workers {num_workers} is more than this node's limit of {limit} workers "
                         f"({where}): pass --max-workers {num_workers} (or more) to allow them, "
                         f"or ask for at most {limit} workers")
