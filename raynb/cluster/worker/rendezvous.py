"""How a worker forms its torch.distributed process group, and what it listens on.

torch.distributed's store and gloo/NCCL traffic are not authenticated: anyone who
reaches a ``TCPStore`` can read, write and grow it, and break the next rendezvous.
So a worker opens no store that a run does not need, and binds what it opens to
the interface the cluster uses:

- A group whose ranks are all on one machine meets through a ``FileStore`` in the
  node agent's private directory: no socket at all. gloo's own sockets are pinned
  to the loopback interface (``GLOO_SOCKET_IFNAME``).
- A group across machines meets at rank 0's ``TCPStore``, listening on rank 0's
  node IP only (torch's own server always listens on every interface; raynb hands
  it a socket it bound itself, ``master_listen_fd``). Workers of a node other hosts
  can reach keep that store open from their start, so peers never wait out torch's
  connect back-off; on a loopback-only node (a local cluster) none is opened until
  a group needs it. gloo and NCCL use the interface of the node's IP.

Every rendezvous uses keys under a fresh random prefix (the group key).
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
from datetime import timedelta

import psutil

from ..netaddr import is_loopback
from . import task_context

log = logging.getLogger("raynb.worker")

IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def interface_of(ip: str) -> str | None:
    """The name of the network interface that has address ``ip`` (None if none has)."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == ip for a in addrs):
            return name
    return None


def bound_store(host: str, port: int, world_size: int | None, timeout: timedelta):
    """A ``TCPStore`` server listening on ``host:port`` only (port 0: a free one)."""
    import torch.distributed as dist

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        port = sock.getsockname()[1]
        fd = sock.detach()  # the store owns it from here
    try:
        return dist.TCPStore(
            host,
            port,
            world_size,
            is_master=True,
            timeout=timeout,
            wait_for_workers=False,
            master_listen_fd=fd,
        )
    except BaseException:
        os.close(fd)
        raise


class Rendezvous:
    """One worker's process group: formed for a task's ``group``, kept for the next.

    Args:
        node_ip: the IP this worker's node registered with (loopback on a local cluster).
    """

    def __init__(self, node_ip: str):
        self.node_ip = node_ip
        self.group_key: str | None = None
        self._store = None
        self._user_ifnames = {v: os.environ[v] for v in IFNAME_VARS if os.environ.get(v)}
        self._cluster_ifname = interface_of(node_ip)
        self._loopback_ifname = interface_of("127.0.0.1")
        self._pin("NCCL_SOCKET_IFNAME", self._cluster_ifname)
        if not is_loopback(node_ip):
            try:
                self._store_server()
            except Exception as e:  # noqa: BLE001 - rendezvous falls back to a per-group port
                log.warning("no TCPStore server on this worker (%s); rank 0 will open one per group", e)

    def _pin(self, var: str, ifname: str | None) -> None:
        """Point gloo or NCCL at ``ifname``, unless the user chose an interface themselves."""
        if var not in self._user_ifnames and ifname:
            os.environ[var] = ifname

    def _store_server(self):
        """This worker's TCPStore server on its node IP, for groups across nodes where it
        is rank 0. Created at rendezvous time instead, it would often start listening
        after a peer's first connect attempt, and torch's client backs off ~0.6 s."""
        if self._store is None:
            self._store = bound_store(self.node_ip, 0, None, timedelta(seconds=1800))
        return self._store

    @property
    def store_port(self) -> int | None:
        return self._store.port if self._store is not None else None

    def ensure(self, task: dict, worker_name: str) -> None:
        """Form the task's process group, unless this worker is already in it."""
        import torch.distributed as dist

        g = task["group"]
        if self.group_key == g["key"] and dist.is_initialized():
            return
        task_context.new_group_coming()  # subgroups a library cached die with the old group
        if dist.is_initialized():
            dist.destroy_process_group()
        else:
            # init_process_group names the default group from a counter that it bumps
            # before the rendezvous and only destroy_process_group resets. After an init
            # that was interrupted (a cancel during the rendezvous) or failed, this rank
            # would name its group "1" while its peers use "0", and gloo would wait for
            # them forever.
            from torch.distributed import distributed_c10d

            distributed_c10d._world.group_count = 0
        self.group_key = None
        if g["backend"] == "nccl":
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError(
                    f"use_gpu=True but no CUDA device is visible on {socket.gethostname()} "
                    f"(worker {worker_name}); run with use_gpu=False or add a GPU node"
                )
            torch.cuda.set_device(task["gpu_id"])
        timeout = timedelta(seconds=float(g.get("timeout_s") or 1800))
        store = self._store_for(task, timeout)
        # Each rendezvous gets keys of its own in the long-lived store.
        store = dist.PrefixStore(f"raynb/{g['key']}/", store)
        dist.init_process_group(
            g["backend"], store=store, rank=task["rank"], world_size=task["world_size"], timeout=timeout
        )
        self.group_key = g["key"]

    def _store_for(self, task: dict, timeout: timedelta):
        import torch.distributed as dist

        g = task["group"]
        if g.get("file_store"):
            # Every rank on this machine: rendezvous through a file, no socket. A TCP
            # connect to the store now and then stalls 5 s here (a dropped SYN to the
            # v4-mapped address torch's client prefers, under gVisor), one group in ~30.
            # In the node agent's own directory, removed when it exits (see NodeAgent).
            self._pin("GLOO_SOCKET_IFNAME", self._loopback_ifname)
            rdzv_dir = os.environ.get("RAYNB_RDZV_DIR") or tempfile.gettempdir()
            os.makedirs(rdzv_dir, mode=0o700, exist_ok=True)
            path = os.path.join(rdzv_dir, f"raynb-rdzv-{g['key']}")
            if task["world_size"] == 1 and os.path.exists(path):
                os.unlink(path)  # left by an init of this one-rank group that was interrupted
            return dist.FileStore(path, task["world_size"])
        self._pin("GLOO_SOCKET_IFNAME", self._cluster_ifname)
        if g.get("store_port") and task["rank"] == 0:
            return self._store_server()  # rank 0 is the worker whose server the head named
        if task["rank"] == 0:
            return bound_store(g["master_addr"], int(g["master_port"]), task["world_size"], timeout)
        return dist.TCPStore(
            g["master_addr"],
            int(g["master_port"]),
            task["world_size"],
            is_master=False,
            timeout=timeout,
            wait_for_workers=False,
        )
