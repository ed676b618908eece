"""``raynb node``: a node agent on a machine of its own, started by any launcher (by
hand, ssh, Slurm ``srun``, a Kubernetes pod, a Ray actor) that joins a head over TCP.

:func:`run_node` reads the head's connection file (the HMAC key and, off loopback,
the CurveZMQ keys), checks the IP to register and the GPUs to offer, and serves a
:class:`~raynb.cluster.node.agent.NodeAgent` in the calling process until the head stops it,
refuses it (a wrong key or protocol version: exit status 3), or is gone longer than
the reconnect grace (``node.RECONNECT_S``, 60 s: exit status 1, no process left).
"""

from __future__ import annotations

import logging
import os

from ...errors import ClusterError
from ..connection_file import read_connection_file
from ..netaddr import check_host, host_of, is_loopback
from ..node.agent import RECONNECT_S, NodeAgent, visible_gpus
from ..node.host import check_worker_limit, default_max_workers
from ..procutil import worker_sched_policy
from ..protocol import messages
from ..protocol.control import Client, KeyRefused

log = logging.getLogger("raynb.node")


def run_node(
    address: str,
    key_file: str | None = None,
    workers: int = 4,
    gpus: int | None = None,
    node_ip: str | None = None,
    *,
    key: str | bytes | None = None,
    max_workers: int | None = None,
    node_id: str | None = None,
    shared_storage: bool = False,
    reconnect_s: float = RECONNECT_S,
) -> int:
    """Join this machine to the head at ``address`` and serve it until it stops (``raynb
    node``; callable in-process, e.g. from a Ray actor).

    Args:
        address (str): the head's ``tcp://HOST:PORT``.
        key_file (str | None): the head's connection file (0600: HMAC key and Curve keys),
            copied from the head; else ``key`` (or ``$RAYNB_KEY``) for a loopback head.
        workers (int): workers to keep warm here (>= 0).
        gpus (int | None): CUDA devices to offer (the first N visible); None: all visible.
        node_ip (str | None): the IP to register (what gloo and the rank-0 store bind to);
            default ``$RAYNB_NODE_IP``, else the interface that routes to the head.
        max_workers (int | None): the most workers this node holds (default 4 per core, >= 16).
        node_id (str | None): its name in ``raynb status`` and messages (default random).
        shared_storage (bool): this host mounts the head's ``storage_path`` at the same path.
        reconnect_s (float): seconds to keep registering again after losing the head.

    Returns:
        The exit status: 0 after the head's shutdown, 1 head lost, 3 refused by the head.

    Raises:
        ClusterError: ``workers`` over ``max_workers``, an unreadable or non-private key
            file, no key, ``node_ip`` not an address of this machine,
            ``gpus`` more than it has (names what it has), or
            ``$RAYNB_WORKER_SCHED`` not a policy.
    """
    key, curve_keys, node_ip, visible = _checked_node_args(
        address, key_file, key, workers, max_workers, node_ip, gpus
    )
    why = refused_by_head(address, key, curve_keys)
    if why is None:
        agent = NodeAgent(
            address,
            key,
            workers,
            max_workers or default_max_workers(),
            node_id,
            curve_keys,
            node_ip,
            None if gpus is None else visible[:gpus],
            shared_storage,
            reconnect_s,
        )
        code = agent.serve()
        why = agent.refused if code == 3 else None
        if why is None or "node id" in why:
            return code  # served, or refused for its node id (the agent said so)
    return _refused(why, key_file)


def _refused(why: str, key_file: str | None) -> int:
    """Log the head's refusal with the fix (its connection file); returns exit status 3."""
    source = f"the key file {key_file}" if key_file else "the key given (--key or $RAYNB_KEY)"
    log.error(
        "%s; this node agent used %s: copy this head's connection file ($RAYNB_HOME/cluster.json "
        "on the head, mode 0600) here and pass it with --key-file; exit status 3",
        why,
        source,
    )
    return 3


def _checked_node_args(
    address: str,
    key_file: str | None,
    key: str | bytes | None,
    workers: int,
    max_workers: int | None,
    node_ip: str | None,
    gpus: int | None,
) -> tuple[bytes, dict | None, str | None, list]:
    """run_node's arguments checked, in order, before the head is reached: returns the
    key (bytes), the Curve keys (None on loopback), the node's IP (None: the route's) and
    the visible GPUs. Raises ClusterError as run_node says."""
    try:
        worker_sched_policy()
        check_worker_limit(workers, max_workers)
    except ValueError as e:
        raise ClusterError(str(e)) from None
    curve_keys = None
    if key_file:
        info = read_connection_file(key_file)
        if info is None:
            raise ClusterError(
                f"--key-file {key_file} is not a readable raynb connection file "
                "(copy the head's $RAYNB_HOME/cluster.json, mode 0600)"
            )
        key, curve_keys = info["key"], info.get("curve")
    key = key or os.environ.get("RAYNB_KEY")
    if not key:
        raise ClusterError(
            "raynb node needs the cluster key: --key-file FILE (the head's connection file) or $RAYNB_KEY"
        )
    if curve_keys is None and not is_loopback(host_of(address)):
        raise ClusterError(
            f"the head at {address} is off loopback, so it speaks CurveZMQ: give its "
            "connection file with --key-file (it holds the Curve keys)"
        )
    node_ip = node_ip or os.environ.get("RAYNB_NODE_IP") or None
    if node_ip:
        try:
            check_host(node_ip, "--node-ip")
        except ValueError as e:
            raise ClusterError(str(e)) from None
    visible = visible_gpus()
    if gpus is not None and gpus > len(visible):
        raise ClusterError(f"--gpus {gpus}: this machine has {len(visible)} visible CUDA device(s)")
    key = key.encode() if isinstance(key, str) else key
    return key, curve_keys, node_ip, visible


def refused_by_head(address: str, key: bytes, curve_keys: dict | None, timeout: float = 3.0) -> str | None:
    """Why the head at ``address`` refuses these keys (a refusal notice, or a failed
    CurveZMQ handshake), asked once before a node agent starts; None when it accepts
    them or does not answer in ``timeout`` s (not up yet: the agent keeps trying)."""
    client = Client(address, key, {"address": address, "curve": curve_keys})
    try:
        client.request(messages.PING, reply_types=(messages.PONG,), timeout=timeout)
    except KeyRefused as e:
        return str(e)
    except ClusterError:
        return None
    finally:
        client.close()
    return None
