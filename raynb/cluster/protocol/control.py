"""A signed request/reply connection to a head: one DEALER socket.

Used by everything that talks to a head from outside it: the notebook-side client
(``raynb.client``), and the launcher that starts, checks and stops a local cluster.
"""

from __future__ import annotations

import collections
import os
import threading
import time

import zmq

from ...errors import ClusterError
from . import curve_auth as curve
from . import event_batch, messages
from .rejects import refusal

# The routing ids of this process's latest connections: a script that stops the cluster it
# started when it exits names them, so the head tells its own clients from others'
# (head/idle_stop.py). Only recent ones matter: the head forgets quiet clients.
OWN_IDENTITIES: collections.deque = collections.deque(maxlen=64)


class KeyRefused(ClusterError):
    """The head refused this client's key: its refusal notice (a wrong HMAC key, another
    protocol version) or a failed CurveZMQ handshake (a key file of another head)."""


def _new_identity() -> bytes:
    identity = messages.routing_id("client")
    OWN_IDENTITIES.append(identity)
    return identity


# Digests of received messages a client remembers (protocol.Session's replay check).
CLIENT_HISTORY = 4096


class Client:
    """A connection to a head.

    Args:
        address: ``tcp://host:port`` of the head.
        key: the cluster's HMAC key (bytes).
        info: the connection file's content; its ``curve`` keys (a head off loopback)
            make this a CurveZMQ client.

    Use it from one thread at a time (ZeroMQ sockets are not thread-safe).
    """

    # The handler table of the process that owns the connection: each message type it
    # receives unasked -> handler(client, message), called wherever the client waits (a
    # request, a run's follow loop, Tune's) before ``recv`` returns the message. The
    # kernel's client binds its table here (``raynb/client/handlers.py``); a launcher's
    # connection has none.
    handlers: dict = {}

    def __init__(self, address: str, key: bytes, info: dict | None = None):
        self.address = address
        self.info = info or {"address": address}
        # A client hears from one head, whose session's sequence numbers already refuse a
        # replay: a short digest history, not the head's 65,536 (a 10,000-trial sweep's
        # driver held some 20 MB of digests of messages long handled).
        self.session = messages.Session(key, validate=True, history_size=CLIENT_HISTORY)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        messages.configure_socket(self.sock)
        self.sock.setsockopt(zmq.RCVHWM, 0)  # see Head: a run's events must never be dropped
        self.sock.setsockopt(zmq.IDENTITY, _new_identity())
        curve.secure_client(self.sock, self.info.get("curve"))
        self._watch = self._new_watch()
        self.sock.connect(address)
        self._pid = os.getpid()
        self._lock = threading.RLock()
        # The rest of a message that stood for several (a run_events: event_batch.expand).
        self._backlog: collections.deque = collections.deque()
        # The token of the local connection file this client came from (connect() with no
        # address), so a replaced local cluster is noticed; None otherwise.
        self.local_token: str | None = None
        # (inode, size, mtime) of that file when last read: a stat tells it is unchanged.
        self.local_file_seen: tuple | None = None

    # -- low level ---------------------------------------------------------------
    def send(self, msg_type: str, content: dict | None = None, buffers=()) -> None:
        self.session.send(self.sock, msg_type, content, buffers)

    def recv(self, timeout: float | None) -> messages.Message | None:
        """The next verified message, or None after ``timeout`` seconds (None: wait forever).
        A message that carries several (``run_events``) is returned as them, one per call.
        Each is first given to its handler in :attr:`handlers`, if it has one."""
        msg = self._backlog.popleft() if self._backlog else self._receive(timeout)
        if msg is not None:
            handler = self.handlers.get(msg.msg_type)
            if handler is not None:
                handler(self, msg)  # handled; still returned: the head was heard from
        return msg

    def _receive(self, timeout: float | None) -> messages.Message | None:
        """The next verified message off the socket (the first of those it stands for)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self._watch is not None and self._handshake_pending():
                left = 0.1 if left is None else min(left, 0.1)  # look at the handshake again soon
            if not self.sock.poll(None if left is None else left * 1000):
                if deadline is None or time.monotonic() < deadline:
                    continue
                return None
            frames = messages.recv_frames(self.sock)
            why = refusal(frames)
            if why is not None:
                raise KeyRefused(f"{why} (head {self.address})")
            msg = self.session.accept(frames)
            if msg is not None:
                if msg.msg_type in (messages.RUN_EVENTS, messages.RUN_DONE, messages.RUN_ACCEPTED):
                    self._backlog.extend(event_batch.expand(msg))
                    return self._backlog.popleft()
                return msg

    def _new_watch(self) -> curve.HandshakeWatch | None:
        keys = self.info.get("curve")
        if not curve.needs_watch(self.address, keys):
            return None
        return curve.HandshakeWatch(self.sock, has_keys=bool(keys))

    def _handshake_pending(self) -> bool:
        """True while no CurveZMQ handshake has succeeded yet (then watched no more).

        Raises:
            KeyRefused: the head refused this client's keys in the handshake."""
        why = self._watch.refused()
        if why == curve.NO_KEYS:
            raise KeyRefused(f"{why.replace('ADDRESS', repr(self.address))} (head {self.address})")
        if why is not None:
            raise KeyRefused(f"{why}; copy this head's connection file (head {self.address})")
        if self._watch.succeeded:
            self._drop_watch()
            return False
        return True

    def _drop_watch(self) -> None:
        if getattr(self, "_watch", None) is not None:
            self._watch.close(self.sock)
            self._watch = None

    def request(
        self, msg_type: str, content: dict | None = None, reply_types=(), timeout: float = 10.0, buffers=()
    ) -> messages.Message:
        """Send a request and wait for its reply; what else arrives meanwhile goes to its
        handler (:attr:`handlers`: a run's events to the run's follower, if any).

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
                        f"to {msg_type}; is the cluster running? (`raynb status`)"
                        + (
                            "; with CurveZMQ, a key file from another head is refused in the "
                            "handshake: copy this head's connection file"
                            if self.info.get("curve")
                            else ""
                        )
                    )
                if msg.msg_type in reply_types or msg.msg_type == messages.ERROR:
                    return msg

    def hello(self, timeout: float = 5.0, keep: bool = False, raise_refused: bool = False) -> bool:
        """Say hello (a client attaching: the head counts it as one using the cluster,
        ``head/idle_stop.py``); False when the head does not answer, or, with ``keep``
        (``raynb start``: no stop when idle any more), when it did not keep the cluster
        (a head older than this client).

        Raises:
            KeyRefused: with ``raise_refused``, the head refused this client's key (else False).
        """
        try:
            reply = self.request(
                messages.HELLO,
                {"role": "client", **({"keep": True} if keep else {})},
                reply_types=(messages.HELLO_REPLY,),
                timeout=timeout,
            )
        except KeyRefused:
            if raise_refused:
                raise
            return False
        except ClusterError:
            return False
        return reply.msg_type == messages.HELLO_REPLY and (not keep or reply.content.get("kept") is True)

    def ping(self, timeout: float = 2.0) -> bool:
        try:
            self.request(messages.PING, reply_types=(messages.PONG,), timeout=timeout)
            return True
        except ClusterError:
            return False

    def status(self, timeout: float = 10.0) -> dict:
        return self.request(
            messages.STATUS_REQUEST, reply_types=(messages.STATUS_REPLY,), timeout=timeout
        ).content

    def reconnect(self) -> None:
        """A fresh socket with a new routing id (after a silence: the head's ROUTER ignores
        a second connection under an id it still holds); what the old one queued is lost."""
        with self._lock:
            self._drop_watch()
            self.sock.close(0)
            self._backlog.clear()
            self.sock = self.ctx.socket(zmq.DEALER)
            messages.configure_socket(self.sock)
            self.sock.setsockopt(zmq.RCVHWM, 0)
            self.sock.setsockopt(zmq.IDENTITY, _new_identity())
            curve.secure_client(self.sock, self.info.get("curve"))
            self._watch = self._new_watch()
            self.sock.connect(self.address)

    def close(self) -> None:
        if self._pid == os.getpid():
            self._drop_watch()
            self.sock.close(0)
            self.ctx.term()
