"""``TF_CONFIG`` for a rank, kept stable so that a warm rank keeps its TensorFlow runtime.

TensorFlow configures its collectives once per process (``MultiWorkerMirroredStrategy``
starts a gRPC server on the rank's ``TF_CONFIG`` address and cannot be pointed at another
cluster afterwards: a second strategy with other addresses hangs). So each worker process
picks its TensorFlow port once, on its node's IP, and keeps it: a re-run on the same ranks
(the head reuses a process group of idle workers in the same rank order) gives every rank
the same ``TF_CONFIG``, and ``MultiWorkerMirroredStrategy()`` starts at once, TensorFlow
already imported.

When the cluster changes (another world size, other workers), a rank whose process already
runs TensorFlow for another cluster cannot join. Rank 0 then names those ranks to the head
(a ``replace_workers`` event): the head kills them, their nodes fork fresh workers, and the
run is queued again on fresh ones, as an elastic resize (not a failure, FailureConfig does
not count it). The addresses travel over the run's gloo group as JSON (never unpickled).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from ...cluster.worker import task_context
from .. import session as _session
from ..tensorflow_guard import TF_TASK_KEY

# This process's TensorFlow address and the cluster it configured (None: not yet).
_port: int | None = None
_configured: list | None = None
# How long the ranks wait for the head to replace stale workers (s) before giving up.
REPLACE_WAIT_S = 60.0


def _node_ip() -> str:
    return os.environ.get("RAYNB_NODE_IP") or "127.0.0.1"


def own_address() -> str:
    """This process's TensorFlow address, ``ip:port`` (the port chosen once)."""
    global _port
    ip = _node_ip()
    if _port is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((ip, 0))
            _port = s.getsockname()[1]
    return f"{ip}:{_port}"


def _gather(mine: dict, world: int) -> list[dict]:
    if world == 1:
        return [mine]
    from ..lightgbm.network import _all_gather_strings

    return [json.loads(s) for s in _all_gather_strings(json.dumps(mine), world)]


def stale_ranks(every: list[dict]) -> list[int]:
    """Ranks whose process already runs TensorFlow for another cluster than this run's.

    Args:
        every: per rank, ``{"addr": "ip:port", "tf": TensorFlow's runtime started, "spec": the
            addresses it configured or None, "zygote": TensorFlow imported by the zygote that
            forked it (not yet configured when ``spec`` is None)}``.
    """
    want = [e["addr"] for e in every]
    fresh = [e["spec"] is None and e.get("zygote") for e in every]
    return [r for r, e in enumerate(every) if e["tf"] and e["spec"] != want and not fresh[r]]


def _tf_runtime_started() -> bool:
    """TensorFlow's runtime started in this process (its eager context initialized), so its
    collectives can no longer be configured. An import alone does not start it: a script's
    module-level ``import tensorflow`` is imported again when its function is unpickled."""
    if "tensorflow" not in sys.modules:
        return False
    try:
        from tensorflow.python.eager import context
    except ImportError:
        return True
    return context.context()._context_handle is not None


def setup() -> dict:
    """Set ``TF_CONFIG`` and ``TF_USE_LEGACY_KERAS`` for this rank (every rank must call it).

    Returns:
        dict: the ``TF_CONFIG`` set.

    Raises:
        RuntimeError: stale workers were not replaced within ``REPLACE_WAIT_S``.
    """
    global _configured
    task = _session._require("TensorflowTrainer")
    world, rank = task["world_size"], task["rank"]
    mine = {
        "addr": own_address(),
        "tf": _tf_runtime_started(),
        "spec": _configured,
        "zygote": os.environ.get("RAYNB_WORKER_KIND") == "tensorflow",
    }
    every = _gather(mine, world)
    stale = stale_ranks(every)
    if stale:
        _await_replacement(rank, stale)
    addresses = [e["addr"] for e in every]
    config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": rank}}
    os.environ["TF_CONFIG"] = json.dumps(config)
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    _configured = addresses  # what MultiWorkerMirroredStrategy() will configure
    task_context.state()[TF_TASK_KEY] = True
    return config


def mark_aborted() -> None:
    """This process's TensorFlow collectives may be aborted (a run failed or was cancelled
    in them): the next ``TensorflowTrainer`` run replaces it with a fresh worker."""
    global _configured
    if "tensorflow" in sys.modules:
        _configured = ["aborted"]


def _await_replacement(rank: int, stale: list[int]) -> None:
    """Rank 0 asks the head to replace ``stale``; every rank then waits to be stopped
    (cancelled, or killed if stale) for the run's next attempt on fresh workers."""
    if rank == 0:
        why = (
            f"rank(s) {stale} run TensorFlow set up for another cluster (TensorFlow configures "
            "its collectives once per process): replaced by fresh workers"
        )
        task_context.emit({"kind": "replace_workers", "ranks": stale, "text": why}, wait=True)
    deadline = time.monotonic() + REPLACE_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.05)  # the head's cancel ends this (KeyboardInterrupt), or its kill
    raise RuntimeError(
        f"ranks {stale} run TensorFlow set up for another cluster and were not replaced within "
        f"{REPLACE_WAIT_S:.0f}s (a head older than this raynb?); restart the cluster "
        "(`raynb stop`) or run with the same num_workers as before"
    )
