"""CurveZMQ for every link off loopback: keys, the server and client sides, and ZAP.

Whenever the head listens on anything but loopback, its ROUTER is a CurveZMQ server
(RFC 26, libsodium through pyzmq) and every peer (clients, node agents, workers) a
Curve client, on top of the HMAC signing of ``protocol``: the traffic is encrypted,
and a peer without the cluster's client key is refused during the handshake, before
any of its frames reach the head's loop.

Keys (Z85 text, as ``zmq.curve_keypair``): the head makes a server keypair and a
client keypair when it starts. The server's secret key never leaves the head's
memory; the connection file (0600) holds the server's public key and the client
keypair, so whoever holds that file, and only they, can connect.

ZAP (RFC 27): ``zmq.auth.thread.ThreadAuthenticator`` answers the head's handshakes,
allowing only the cluster's client key. A socket monitor counts every failed
handshake (no Curve, a wrong server key, an unknown client key) for ``raynb status``.
"""

from __future__ import annotations

import logging
import os
import threading

import zmq

from ..netaddr import is_loopback

log = logging.getLogger("raynb.curve")

ENV = {
    "server_public": "RAYNB_CURVE_SERVER_PUBLIC",
    "client_public": "RAYNB_CURVE_PUBLIC",
    "client_secret": "RAYNB_CURVE_SECRET",
}
# A client with the HMAC key alone, at a head off loopback.
NO_KEYS = (
    "the head encrypts every connection with CurveZMQ (a head listening off loopback always "
    "does) and this client has no Curve keys: the cluster key alone is not enough off "
    "loopback. Connect with the head's connection file, which holds both: copy the head "
    "machine's $RAYNB_HOME/cluster.json (or the cluster-keys.json of `raynb keygen`) here, "
    "mode 0600, and pass it: raynb.connect(ADDRESS, key_file=PATH), or for a node agent "
    "`raynb node --address ADDRESS --key-file PATH`"
)

_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


def needed(host: str) -> bool:
    """Curve is on for a head that listens on ``host``: anything but loopback."""
    return not is_loopback(host)


def new_keys() -> dict:
    """A fresh server keypair and client keypair (Z85 str): ``server_public``,
    ``server_secret``, ``client_public``, ``client_secret``."""
    sp, ss = zmq.curve_keypair()
    cp, cs = zmq.curve_keypair()
    return {
        "server_public": sp.decode(),
        "server_secret": ss.decode(),
        "client_public": cp.decode(),
        "client_secret": cs.decode(),
    }


def client_part(keys: dict | None) -> dict | None:
    """What peers need (no server secret): written to the connection file."""
    if not keys:
        return None
    return {k: keys[k] for k in ENV}


def write_keys(directory) -> tuple:
    """``raynb keygen DIR``: ``DIR/head-keys.json`` (the HMAC key and every Curve key, the
    server's secret too: for the head alone) and ``DIR/cluster-keys.json`` (what node
    agents and clients need), both 0600. Returns their paths.

    Raises:
        ClusterError: either file exists (keys are never overwritten).
    """
    from pathlib import Path

    from ...errors import ClusterError
    from ..connection_file import write_connection_file
    from .messages import PROTOCOL_VERSION, new_key

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    head, peers = d / "head-keys.json", d / "cluster-keys.json"
    for p in (head, peers):
        if p.exists():
            raise ClusterError(f"{p} exists; raynb keygen never overwrites keys")
    keys, hmac_key = new_keys(), new_key().decode()
    write_connection_file(
        {"address": None, "key": hmac_key, "curve": keys, "version": PROTOCOL_VERSION}, head
    )
    write_connection_file(
        {"address": None, "key": hmac_key, "curve": client_part(keys), "version": PROTOCOL_VERSION}, peers
    )
    return head, peers


def read_head_keys(path) -> dict:
    """The ``head-keys.json`` of :func:`write_keys` (checked private, as a connection file).

    Raises:
        ClusterError: not readable, not private, or without the server's secret key.
    """
    from ...errors import ClusterError
    from ..connection_file import read_connection_file

    info = read_connection_file(path)
    if info is None or len((info.get("curve") or {}).get("server_secret") or "") != 40:
        raise ClusterError(
            f"{path} is not a head-keys.json made by `raynb keygen` (it needs the key "
            "and every Curve key, the server's secret too)"
        )
    return info


def from_env() -> dict | None:
    """The client keys a node agent hands its zygote and workers, or None (loopback)."""
    keys = {k: os.environ.get(v, "") for k, v in ENV.items()}
    return keys if all(keys.values()) else None


def to_env(keys: dict | None) -> dict:
    """The environment that carries ``keys`` to a child process ({} without Curve)."""
    return {ENV[k]: keys[k] for k in ENV} if keys else {}


def secure_client(sock: zmq.Socket, keys: dict | None) -> None:
    """Make ``sock`` a Curve client of the head (before ``connect``); no-op without keys.

    Raises:
        ValueError: a key is missing or not 40 characters of Z85.
    """
    if not keys:
        return
    for k in ENV:
        if len(keys.get(k) or "") != 40:
            raise ValueError(
                f"the Curve key {k!r} in the key file is missing or not 40 characters "
                "of Z85; copy the head's connection file again"
            )
    sock.curve_serverkey = keys["server_public"].encode()
    sock.curve_publickey = keys["client_public"].encode()
    sock.curve_secretkey = keys["client_secret"].encode()


def needs_watch(address: str, keys: dict | None) -> bool:
    """Whether a client's handshakes with the head at ``address`` are worth watching
    (:class:`HandshakeWatch`): it has Curve keys (the head may refuse them), or it has none
    and the head is off loopback, where every head speaks CurveZMQ only (a client that
    lacks the keys would otherwise hear nothing at all)."""
    from ..netaddr import host_of

    return bool(keys) or (address.startswith("tcp://") and not is_loopback(host_of(address)))


class HandshakeWatch:
    """A client's handshakes with the head, watched until one succeeds: a key file of
    another head fails them at once (the head's ZAP refuses an unknown client key,
    ``EVENT_HANDSHAKE_FAILED_AUTH``; a wrong server key makes the head drop the handshake,
    ``..._NO_DETAIL``), and so does a client without Curve keys at a head off loopback (the
    two sides' security mechanisms differ, ``..._FAILED_PROTOCOL``); nothing else would say
    so: no message ever arrives.

    Args:
        sock: the client socket (already :func:`secure_client`), before or after ``connect``.
        has_keys (bool): the client speaks CurveZMQ (it was given Curve keys).
    """

    def __init__(self, sock: zmq.Socket, has_keys: bool = True):
        self.monitor = sock.get_monitor_socket(_FAILED | zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self.succeeded = False
        self.has_keys = has_keys
        self._failed: int | None = None
        self._value = 0

    def refused(self) -> str | None:
        """Why the head refused this client's keys, once a handshake failed and none
        succeeded since; None otherwise. Never blocks."""
        from zmq.utils.monitor import parse_monitor_message

        while self.monitor.poll(0):
            event = parse_monitor_message(self.monitor.recv_multipart())
            if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.succeeded, self._failed = True, None
            elif event["event"] & _FAILED:
                self._failed, self._value = event["event"], event["value"]
        if self._failed is None:
            return None
        if not self.has_keys:
            # Off loopback, where every head speaks CurveZMQ only. The head sees the two
            # mechanisms differ and may close the connection before this side does: a
            # mechanism mismatch here, or a handshake cut short (EPIPE, ECONNRESET).
            return NO_KEYS
        if (
            self._failed == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            and self._value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
        ):
            return (
                "this client speaks CurveZMQ and the head does not (a head on loopback does not "
                "encrypt): connect with the head's own connection file"
            )
        if self._failed == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            return (
                "the head refused this peer's key in the CurveZMQ handshake: its Curve client key "
                "is not this head's (the key file belongs to another head, or to this head before "
                "it was started again with new keys)"
            )
        return (
            "the CurveZMQ handshake with the head failed: the head's public key in the key file is "
            "not this head's (the key file belongs to another head, or to this head before it was "
            "started again with new keys)"
        )

    def close(self, sock: zmq.Socket) -> None:
        try:
            sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self.monitor.close(0)


class Gatekeeper:
    """The head's side: a Curve server socket, a ZAP handler that allows only the
    cluster's client key, and a count of refused handshakes.

    Args:
        ctx: the head's ZeroMQ context (ZAP is per context).
        sock: the head's ROUTER, not yet bound.
        keys: :func:`new_keys`' dict.
    """

    def __init__(self, ctx: zmq.Context, sock: zmq.Socket, keys: dict, on_disconnect=None):
        import zmq.auth.thread  # only a head off loopback needs it (a slow import)

        # A socket has one monitor: this one also tells the head of closed connections.
        self.on_disconnect = on_disconnect

        self.rejected = 0
        self.allowed_key = keys["client_public"].encode()
        self.auth = zmq.auth.thread.ThreadAuthenticator(ctx, log=logging.getLogger("raynb.zap"))
        self.auth.start()
        self.auth.configure_curve_callback(domain="*", credentials_provider=self)
        sock.curve_server = True
        sock.curve_secretkey = keys["server_secret"].encode()
        sock.curve_publickey = keys["server_public"].encode()
        # MONITOR_STOPPED: the event that ends the watching thread at close().
        events = _FAILED | zmq.EVENT_MONITOR_STOPPED | (zmq.EVENT_DISCONNECTED if on_disconnect else 0)
        self._monitor = sock.get_monitor_socket(events)
        self._thread = threading.Thread(target=self._watch, name="raynb-curve-monitor", daemon=True)
        self._thread.start()

    def callback(self, domain: str, key: bytes) -> bool:
        """ZAP: only the cluster's client key gets in (the refusal is counted by the monitor)."""
        ok = key == self.allowed_key
        if not ok:
            log.warning("refused a Curve handshake with an unknown client key %s", key[:8].decode())
        return ok

    def _watch(self) -> None:
        from zmq.utils.monitor import recv_monitor_message  # it imports asyncio: a slow import

        try:
            while True:
                event = recv_monitor_message(self._monitor)
                if event["event"] == zmq.EVENT_MONITOR_STOPPED:
                    break
                if event["event"] == zmq.EVENT_DISCONNECTED:
                    self.on_disconnect(int(event["value"]))
                    continue
                self.rejected += 1
                if self.rejected in (1, 10, 100) or self.rejected % 1000 == 0:
                    log.warning(
                        "refused %d connection(s) whose Curve handshake failed (no Curve, "
                        "a wrong server key or an unknown client key)",
                        self.rejected,
                    )
        except zmq.ZMQError:
            pass

    def close(self, sock: zmq.Socket) -> None:
        try:
            sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self._thread.join(timeout=1)
        self._monitor.close(0)
        self.auth.stop()
