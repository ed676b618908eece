"""The notebook side of the cluster: one DEALER socket to the head.

``connect()`` attaches to the local cluster (starting one if none runs) or to a
remote head, and keeps the connection for the life of the process, so every
cell after the first reuses it.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import zmq

from . import protocol as P
from .errors import ClusterError


class Client:
    """A connection to a head.

    Args:
        address: ``tcp://host:port`` of the head.
        key: the cluster's HMAC key (bytes).

    Use it from one thread at a time (ZeroMQ sockets are not thread-safe).
    """

    def __init__(self, address: str, key: bytes, info: dict | None = None):
        self.address = address
        self.info = info or {"address": address}
        self.session = P.Session(key)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        P.configure_socket(self.sock)
        self.sock.setsockopt(zmq.RCVHWM, 0)  # see Head: a run's events must never be dropped
        self.sock.setsockopt(zmq.IDENTITY, P.routing_id("client"))
        self.sock.connect(address)
        self._pid = os.getpid()
        self._lock = threading.RLock()
        # The token of the local connection file this client came from (connect() with no
        # address), so a replaced local cluster is noticed; None otherwise.
        self.local_token: str | None = None

    # -- low level ---------------------------------------------------------------
    def send(self, msg_type: str, content: dict | None = None, buffers=()) -> None:
        self.session.send(self.sock, msg_type, content, buffers)

    def recv(self, timeout: float | None) -> P.Message | None:
        """The next verified message, or None after ``timeout`` seconds (None: wait forever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.sock.poll(None if left is None else left * 1000):
                return None
            msg = self.session.recv(self.sock)
            if msg is not None:
                return msg

    def request(self, msg_type: str, content: dict | None = None, reply_types=(), timeout: float = 10.0,
                buffers=()) -> P.Message:
        """Send a request and wait for its reply, skipping stale run events.

        Raises:
            ClusterError: no reply within ``timeout`` seconds (the head is gone or busy).
        """
        with self._lock:
            self.send(msg_type, content, buffers)
            deadline = time.monotonic() + timeout
            while True:
                msg = self.recv(max(0.0, deadline - time.monotonic()))
                if msg is None:
                    raise ClusterError(
                        f"no reply from the raynb head at {self.address} within {timeout:.0f}s "
                        f"to {msg_type}; is the cluster running? (`raynb status`)")
                if msg.msg_type in reply_types or msg.msg_type == P.ERROR:
                    return msg

    def ping(self, timeout: float = 2.0) -> bool:
        try:
            self.request(P.PING, reply_types=(P.PONG,), timeout=timeout)
            return True
        except ClusterError:
            return False

    def status(self, timeout: float = 10.0) -> dict:
        return self.request(P.STATUS_REQUEST, reply_types=(P.STATUS_REPLY,), timeout=timeout).content

    def close(self) -> None:
        if self._pid == os.getpid():
            self.sock.close(0)
            self.ctx.term()


_client: Client | None = None


def get_client(connect_if_needed: bool = True) -> Client | None:
    """The process's connection, connecting as ``connect()`` does when there is none."""
    if _client is None and connect_if_needed:
        return connect()
    if _client is not None and _client._pid != os.getpid():
        return connect() if connect_if_needed else None  # forked: the socket is not ours
    if _client is not None and connect_if_needed and _client.local_token is not None:
        from .connection import read_connection_file

        current = read_connection_file()
        if current is None or current.get("token") != _client.local_token:
            # The local cluster this client attached to was stopped or replaced (`raynb
            # stop; raynb start` in a terminal): following the dead head would make every
            # fit() wait for a reply that never comes. Attach as connect() does.
            disconnect()
            return connect()
    return _client


def connect(address: str | None = None, *, key: str | bytes | None = None, num_workers: int = 4,
            timeout: float = 120.0) -> Client:
    """Attach to a raynb cluster (``ray.init`` for raynb).

    Args:
        address: None for the local cluster (started in the background with
            ``num_workers`` warm workers when none runs, and left running for the
            next kernel); a path to a connection file; or ``tcp://host:port`` of a
            remote head, with ``key`` (or ``$RAYNB_KEY``).
        key: the cluster key for a ``tcp://`` address.
        num_workers (int): warm workers for a cluster this call starts.
        timeout (float): seconds to wait for a started cluster to be ready.

    Returns:
        The process-wide :class:`Client`; later calls return the same one.

    Raises:
        ClusterError: the head cannot be reached or the cluster cannot start.
    """
    global _client
    from .cluster import ensure_local_cluster
    from .connection import read_connection_file

    if _client is not None and _client._pid == os.getpid() and address is None:
        if _client.ping():
            return _client
        _client.close()
        _client = None  # the head went away: find or start a fresh one
    if address is None:
        info = ensure_local_cluster(num_workers=num_workers, timeout=timeout)
    elif address.startswith("tcp://"):
        k = key or os.environ.get("RAYNB_KEY")
        if not k:
            raise ClusterError(f"connecting to {address} needs the cluster key: pass key=... or set "
                               "RAYNB_KEY (it is in the head's connection file)")
        info = {"address": address, "key": k.decode() if isinstance(k, bytes) else k}
    else:
        info = read_connection_file(Path(address))
        if info is None:
            raise ClusterError(f"{address} is not a readable raynb connection file")
    client = Client(info["address"], info["key"].encode(), info)
    if address is None:
        client.local_token = info.get("token")
    if not client.ping(timeout=5.0):
        client.close()
        raise ClusterError(f"the raynb head at {info['address']} does not answer; "
                           "check `raynb status`, or `raynb stop` and start again")
    _client = client
    return client


def disconnect() -> None:
    """Close this process's connection (the cluster keeps running)."""
    global _client
    if _client is not None:
        _client.close()
        _client = None
