"""The notebook side of the cluster: one DEALER socket to the head.

``connect()`` attaches to the local cluster (starting one if none runs) or to a
remote head, and keeps the connection for the life of the process, so every
cell after the first reuses it.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..cluster.protocol.control import Client, KeyRefused
from ..errors import ClusterError
from .script_exit import exit_on_sigterm

_client: Client | None = None


def get_client(connect_if_needed: bool = True) -> Client | None:
    """The process's connection, connecting as ``connect()`` does when there is none."""
    if _client is None and connect_if_needed:
        return connect()
    if _client is not None and _client._pid != os.getpid():
        return connect() if connect_if_needed else None  # forked: the socket is not ours
    if _client is not None and connect_if_needed and _client.local_token is not None:
        from ..cluster.connection_file import read_connection_file

        if local_head_gone(_client) is not None:
            # Killed (its connection file left behind): a request would wait for a reply
            # that never comes. connect() says so and starts a cluster like the old one.
            return connect(num_workers=_client.info.get("workers") or 4)
        if _connection_file_changed(_client):
            current = read_connection_file()
            if current is None or current.get("token") != _client.local_token:
                # The local cluster this client attached to was stopped or replaced (`raynb
                # stop; raynb start` in a terminal): following the dead head would make every
                # fit() wait for a reply that never comes. Attach as connect() does.
                disconnect()
                return connect()
    return _client


def _connection_file_changed(client: Client) -> bool:
    """Whether the local connection file may name another cluster than when last read:
    it is replaced by rename, so an unchanged inode, size and mtime is the same file
    (a stat, where reading and checking it on every fit() cost more than the rest of the
    client's work; RAYNB_HOME's checks are left to that read: nothing is read or trusted
    here, and a file replaced, re-owned or re-moded is read again)."""
    from ..cluster.connection_file import connection_file_name

    try:
        st = os.stat(connection_file_name(), follow_symlinks=False)
        seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_uid, st.st_mode)
    except OSError:
        return True
    changed = client.local_file_seen != seen
    client.local_file_seen = seen
    return changed


def local_head_gone(client: Client | None) -> int | None:
    """The pid of the local head ``client`` attached to, when that process is gone.

    None while it runs, and for a remote head (its pid means nothing here).
    """
    from ..cluster.connection_file import head_alive

    if client is None or client.local_token is None:
        return None
    pid = client.info.get("pids", {}).get("head")
    return pid if pid and not head_alive(client.info) else None


def check_head_alive(client: Client) -> None:
    """Fail at once when the local head's process is gone (killed), instead of after a
    silence of some seconds: the run followed ended with it.

    Raises:
        ClusterError: the local head's process is gone.
    """
    pid = local_head_gone(client)
    if pid is not None:
        raise ClusterError(
            f"lost contact with the raynb head at {client.address}: the local cluster's "
            f"head (pid {pid}) is gone, and this run with it; the next run starts a "
            "new cluster"
        )


def _remote_info(address: str, key: str | bytes | None, key_file: str | None) -> dict:
    """The connection info for ``address``: a ``tcp://`` head (with ``key_file`` or
    ``key``/``$RAYNB_KEY``) or a connection file's path. Raises ClusterError naming what
    is missing or unreadable."""
    from ..cluster.connection_file import read_connection_file

    if address.startswith("tcp://") and key_file:
        info = read_connection_file(Path(key_file))
        if info is None:
            raise ClusterError(f"key_file={key_file!r} is not a readable raynb connection file")
        info = {**info, "address": address}
    elif address.startswith("tcp://"):
        k = key or os.environ.get("RAYNB_KEY")
        if not k:
            raise ClusterError(
                f"connecting to {address} needs the cluster key: pass key=... or set "
                "RAYNB_KEY (it is in the head's connection file)"
            )
        info = {"address": address, "key": k.decode() if isinstance(k, bytes) else k}
    else:
        info = read_connection_file(Path(address))
        if info is None:
            raise ClusterError(f"{address} is not a readable raynb connection file")
    return info


def _attach(info: dict, address: str | None, key_file: str | None) -> Client:
    """A connection to the head ``info`` names, once the head answered its hello.

    Raises:
        KeyRefused: the head refused the key (saying where this client's key came from).
        ClusterError: the head does not answer.
    """
    client = Client(info["address"], info["key"].encode(), info)
    if address in (None, "ray"):
        client.local_token = info.get("token")
    try:
        answered = client.hello(raise_refused=True)
    except KeyRefused as e:
        client.close()
        source = (
            f"key_file={key_file!r}"
            if key_file
            else "key=... or $RAYNB_KEY"
            if address and address.startswith("tcp://")
            else f"the connection file {info.get('path') or address or 'of RAYNB_HOME'}"
        )
        raise KeyRefused(f"{e}. This client's key came from {source}") from None
    if not answered:
        client.close()
        raise ClusterError(
            f"the raynb head at {info['address']} does not answer; "
            "check `raynb status`, or `raynb stop` and start again"
        )
    return client


def connect(
    address: str | None = None,
    *,
    key: str | bytes | None = None,
    key_file: str | None = None,
    num_workers: int = 4,
    timeout: float = 120.0,
    ray_address: str | None = None,
) -> Client:
    """Attach to a raynb cluster (``ray.init`` for raynb).

    Args:
        address: None for the local cluster (started in the background with
            ``num_workers`` warm workers when none runs, and left running for the
            next kernel); a path to a connection file; or ``tcp://host:port`` of a
            remote head, with ``key_file`` (the head's connection file, copied here with
            mode 0600: it holds the key and, for a head off loopback, the CurveZMQ keys)
            or ``key`` (or ``$RAYNB_KEY``; loopback heads only).
        key: the cluster key for a ``tcp://`` address on loopback.
        key_file (str | None): the head's connection file for a ``tcp://`` address.
        num_workers (int): warm workers for a cluster this call starts.
        timeout (float): seconds to wait for a started cluster to be ready.
        ray_address (str | None): ``"auto"`` or ``HOST:PORT`` of a Ray cluster: attach to
            raynb running there (its head is the named actor ``raynb-head``), starting it,
            with one node agent per Ray node, when it does not run yet
            (``cluster.launch.ray_engine.start_on_ray``; needs ``raynb[ray]``).

    Returns:
        The process-wide :class:`Client`; later calls return the same one.

    Raises:
        ClusterError: the head cannot be reached or the cluster cannot start.
    """
    global _client
    from ..cluster.launch.local import ensure_local_cluster

    message = None
    if _client is not None and _client._pid == os.getpid() and address is None:
        gone = local_head_gone(_client)
        if gone is None and _client.hello():
            return _client
        if gone is not None:
            message = f"raynb: the local cluster's head (pid {gone}) is gone; starting a new one"
        _client.close()
        _client = None  # the head went away: find or start a fresh one
    if ray_address is not None:
        from ..cluster.launch.ray_engine import start_on_ray

        info, _ = start_on_ray(ray_address, timeout=timeout)
        address = "ray"
    elif address is None:
        info = ensure_local_cluster(num_workers=num_workers, timeout=timeout, message=message)
    else:
        info = _remote_info(address, key, key_file)
    client = _attach(info, address, key_file)
    _client = client
    exit_on_sigterm()  # a script's SIGTERM cancels its run and stops the cluster it started
    return client


def disconnect() -> None:
    """Close this process's connection (the cluster keeps running)."""
    global _client
    if _client is not None:
        _client.close()
        _client = None


def cluster_status(timeout: float = 10.0) -> dict:
    """The cluster's status (nodes, workers with pid / run / rank, runs), over a
    connection of its own, so it is safe to call from any thread, also while this
    process follows a run (``raynb.cluster_status()``).

    Returns:
        dict with ``nodes``, ``workers`` (each: ``worker_id``, ``pid``, ``state``,
        ``run``, ``rank``, ``cpu_percent``, ``rss`` bytes) and ``runs``.

    Raises:
        ClusterError: no cluster is running or it does not answer in ``timeout`` s.
    """
    client = connection_of_its_own()
    try:
        return client.status(timeout=timeout)
    finally:
        client.close()


def connection_of_its_own() -> Client:
    """A new connection to the cluster this process uses (the caller closes it): a ZeroMQ
    socket serves one thread, and the process's own connection may be in use by another
    (a fit following its run while a thread asks about it).

    Raises:
        ClusterError: no cluster is running.
    """
    from ..cluster.launch.local import running_cluster

    current = get_client(connect_if_needed=False)
    info = current.info if current is not None and "key" in current.info else running_cluster()
    if info is None:
        raise ClusterError("no raynb cluster is running; start one with raynb.connect() or `raynb start`")
    return Client(info["address"], info["key"].encode(), info)
