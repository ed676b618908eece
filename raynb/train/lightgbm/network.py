"""LightGBM's socket network over a run's ranks (``ray.train.lightgbm.get_network_params``).

LightGBM's data-parallel training (``tree_learner="data"``) connects every machine to
every other over TCP, from ``machines="ip:port,ip:port,..."`` (one entry per machine, in
rank order) and each machine's ``local_listen_port``. Before the training function runs,
every rank picks a free port on its node's IP (``RAYNB_NODE_IP``: loopback on a local
cluster), and the ``ip:port`` strings reach every rank over the run's gloo group as plain
bytes (never unpickled).

Known limit (lightgbm 4.x): its listener binds ``local_listen_port`` on every interface;
lightgbm has no option for the address. The ports are chosen fresh for every run.
"""
from __future__ import annotations

import contextlib
import socket

from ...cluster.worker import task_context
from .. import session as _session

STATE_KEY = "lightgbm_network_params"
# LightGBM's own socket timeout, minutes (its "time_out"): a peer that never connects
# fails the run instead of holding the ranks.
TIME_OUT_MIN = 5


def node_ip() -> str:
    """The IP this worker's node registered with."""
    import os

    return os.environ.get("RAYNB_NODE_IP") or "127.0.0.1"


def _free_port(ip: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def _all_gather_strings(mine: str, world: int) -> list[str]:
    """Every rank's ``mine``, in rank order, over the run's group (UTF-8 bytes in tensors)."""
    import torch
    import torch.distributed as dist

    data = mine.encode()
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([len(data)], dtype=torch.int64))
    longest = int(max(s.item() for s in sizes))
    buf = torch.zeros(longest, dtype=torch.uint8)
    buf[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    every = [torch.empty(longest, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(every, buf)
    return [bytes(t[:int(n.item())].tolist()).decode() for t, n in zip(every, sizes)]


@contextlib.contextmanager
def network_params():
    """Set up this run's network parameters for the block (every rank must enter it).

    Yields:
        dict: ``num_machines``, ``local_listen_port``, ``machines``, ``time_out`` (empty
        with one rank: LightGBM then trains alone).
    """
    task = _session._require("network_params")
    state = task_context.state()
    world = task["world_size"]
    params: dict = {}
    if world > 1:
        ip = node_ip()
        port = _free_port(ip)
        machines = _all_gather_strings(f"{ip}:{port}", world)
        params = {"num_machines": world, "local_listen_port": port, "machines": ",".join(machines),
                  "time_out": TIME_OUT_MIN}
    state[STATE_KEY] = params
    try:
        yield dict(params)
    finally:
        state.pop(STATE_KEY, None)


def get_network_params() -> dict:
    """LightGBM's network parameters for this rank (``ray.train.lightgbm.get_network_params``):
    merge them into ``lightgbm.train``'s params inside a ``LightGBMTrainer`` function, with
    ``tree_learner="data"`` (or "voting" / "feature").

    Returns:
        dict: ``num_machines``, ``local_listen_port``, ``machines``, ``time_out``; empty
        with one rank.

    Raises:
        RuntimeError: called outside a ``LightGBMTrainer``'s function (a ``TorchTrainer``
            has no LightGBM network).
    """
    _session._require("get_network_params")
    params = task_context.state().get(STATE_KEY)
    if params is None:
        raise RuntimeError("get_network_params() is only set up inside a LightGBMTrainer's "
                           "train_loop_per_worker: use raynb.train.lightgbm.LightGBMTrainer, not TorchTrainer")
    return dict(params)


def free_network() -> None:
    """Close LightGBM's sockets in this process (a warm worker runs many trainings)."""
    from ._compat import import_lightgbm

    lgb = import_lightgbm()
    with contextlib.suppress(Exception):
        lgb.basic._safe_call(lgb.basic._LIB.LGBM_NetworkFree())
