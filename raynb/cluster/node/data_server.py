"""The node agent's data socket: shared-memory segments written from another host.

A notebook on another host than a node agent cannot write that node's ``/dev/shm``; it
sends the bytes here instead, on a socket of their own (never the head's, so the control
loop and heartbeats are not held up). The agent binds a ROUTER on its node's address
(loopback for a local cluster, never a wildcard) and advertises its port in
``node_register``. Every message is signed with the cluster key and verified before it
is used (``protocol.Session``, as the control path); content is checked against
``SCHEMAS``. In a cluster off loopback (Curve keys given) the socket is also a CurveZMQ
server with a keypair of its own, whose public key is registered with the port; only
the cluster's client key passes its handshake (``curve.Gatekeeper``), so the data is
encrypted as the control path is.

The client sends ``data_put`` messages of ``CHUNK_BYTES`` each, at most ``WINDOW``
unacknowledged (a credit window: memory on both sides stays bounded, and the agent's
loop handles one chunk between its other work). The first one (``offset`` 0) creates the
segment (0600, ``O_EXCL``, its name must be this agent's: ``shm.segment_name``), the one
with ``done`` closes it; each gets a ``data_ack`` (with ``error`` when refused).
"""

from __future__ import annotations

import errno
import logging
import os
import re

import zmq

from ..protocol import curve_auth as curve
from ..protocol import messages
from . import shm

log = logging.getLogger("raynb.node")

CHUNK_BYTES = 1 << 20
WINDOW = 8
FRAME_LIMIT = CHUNK_BYTES + (64 << 10)


class DataServer:
    """The data socket of node agent ``node_id`` (this process), bound on ``ip``; a Curve
    server when ``curve_keys`` (the cluster's client keys) are given: ``public_key`` is its
    key (Z85 str), None without Curve."""

    def __init__(self, ctx: zmq.Context, key: bytes, ip: str, node_id: str, curve_keys: dict | None = None):
        self.node_id, self.pid = node_id, os.getpid()
        self.session = messages.Session(key, validate=True, frame_bytes=FRAME_LIMIT)
        self.sock = ctx.socket(zmq.ROUTER)
        messages.configure_socket(self.sock, limit=FRAME_LIMIT + (64 << 10))
        self.public_key, self._gate = None, None
        if curve_keys:
            public, secret = zmq.curve_keypair()
            self.public_key = public.decode()
            self._gate = curve.Gatekeeper(
                ctx,
                self.sock,
                {
                    "server_public": self.public_key,
                    "server_secret": secret.decode(),
                    "client_public": curve_keys["client_public"],
                },
            )
        self.port = self.sock.bind_to_random_port(f"tcp://{ip}")
        self._open: dict[str, int] = {}  # segment name -> fd, while being written
        self._mine = re.compile(rf"^{re.escape(shm.PREFIX + node_id)}-{self.pid}-[A-Za-z0-9_]+-[0-9a-f]+$")

    def handle(self) -> None:
        """Take one message from the socket and act on a ``data_put`` (never raises: a
        peer's fault is its own); a node agent dispatches :meth:`receive`'s through its
        handler table instead."""
        msg = self.receive()
        if msg is not None and msg.msg_type == messages.DATA_PUT:
            self.on_put(msg)

    def receive(self) -> messages.Message | None:
        """The socket's next verified message (None: rejected, counted, or a chunk)."""
        frames = self.sock.recv_multipart(copy=False)
        return self.session.accept(frames[1:], frames[0].bytes)

    def on_put(self, msg: messages.Message) -> None:
        """Write a ``data_put``'s piece and answer ``data_ack`` (with the error, if any)."""
        identity, c = msg.identity, msg.content
        try:
            self._put(c, msg.buffers)
            reply = {"name": c["name"], "offset": c["offset"]}
        except Exception as e:  # noqa: BLE001 - reported to the sender, the agent goes on
            self._drop(c.get("name"))
            reply = {"name": c["name"], "offset": c["offset"], "error": f"{type(e).__name__}: {e}"}
        self.session.send(self.sock, messages.DATA_ACK, reply, identity=identity)

    def _put(self, c: dict, buffers: list) -> None:
        name, offset, nbytes = c["name"], c["offset"], c["nbytes"]
        if not self._mine.match(name):
            raise ValueError(f"{name!r} is not a segment name of node agent {self.node_id} (pid {self.pid})")
        if offset == 0 and name not in self._open:
            shm.check_room(nbytes, f"segment {name}")
            fd = os.open(os.path.join(shm.SHM_DIR, name), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            self._open[name] = fd
            os.ftruncate(fd, nbytes)
            try:
                os.posix_fallocate(fd, 0, nbytes)  # a full /dev/shm refused now, not a SIGBUS later
            except OSError as e:
                if e.errno == errno.ENOSPC:
                    raise shm.SharedMemoryFull(f"segment {name}", nbytes, shm.free_bytes(), True) from None
                raise
        fd = self._open.get(name)
        if fd is None:
            raise ValueError(f"segment {name!r} is not being written (its first piece was refused?)")
        data = messages.buffer_bytes(buffers[0]) if buffers else b""
        if offset + len(data) > nbytes:
            raise ValueError(
                f"a piece at {offset} of {len(data)} bytes overruns the segment's {nbytes} bytes"
            )
        view, done = memoryview(data), 0
        while done < len(view):
            done += os.pwrite(fd, view[done:], offset + done)
        if c.get("done"):
            os.close(self._open.pop(name))

    def _drop(self, name) -> None:
        fd = self._open.pop(name, None) if isinstance(name, str) else None
        if fd is not None:
            os.close(fd)
            shm.remove(name)

    def drop_key(self, key: str) -> None:
        """Close what is still being written for ``key`` (its run ended; a sender that never
        finished would keep the pages of an unlinked segment alive through the open fd)."""
        for name in [n for n in self._open if n.rsplit("-", 2)[-2] == key]:
            self._drop(name)

    def close(self) -> None:
        for name in list(self._open):
            self._drop(name)
        if self._gate is not None:
            self._gate.close(self.sock)
        self.sock.close(0)


def send_segment(
    ctx: zmq.Context,
    key: bytes,
    address: str,
    name: str,
    arrays: dict,
    layout: dict,
    nbytes: int,
    timeout_s: float = 30.0,
    curve_keys: dict | None = None,
    server_key: str | None = None,
) -> None:
    """Write segment ``name`` (``arrays`` at ``layout``) on the node agent whose data socket
    is ``address`` (``tcp://ip:port``), ``CHUNK_BYTES`` a message, ``WINDOW`` in flight;
    over Curve when the agent registered a ``server_key`` (with this client's ``curve_keys``).

    Raises:
        MemoryError / OSError: the agent refused it (its message).
        TimeoutError: no acknowledgement within ``timeout_s``.
    """
    import numpy as np

    session = messages.Session(key, validate=True, frame_bytes=FRAME_LIMIT)
    sock = ctx.socket(zmq.DEALER)
    messages.configure_socket(sock, limit=FRAME_LIMIT + (64 << 10))
    # A DEALER with no peer blocks in send: a refused Curve handshake (or no agent at the
    # address) drops the pipe, and the first send waited forever instead of timing out.
    sock.setsockopt(zmq.SNDTIMEO, max(1, int(timeout_s * 1000)))
    if server_key:
        curve.secure_client(sock, {**(curve_keys or {}), "server_public": server_key})
    sock.connect(address)
    pieces = []
    for col, (off, _, _) in layout.items():
        a = np.ascontiguousarray(arrays[col])
        raw = memoryview(a.reshape(-1).view(np.uint8)) if a.size else memoryview(b"")
        pieces += [(off + i, raw[i : i + CHUNK_BYTES]) for i in range(0, len(raw), CHUNK_BYTES)]
    if not pieces or pieces[0][0] != 0:
        pieces.insert(0, (0, memoryview(b"")))
    try:
        in_flight = 0
        for i, (offset, piece) in enumerate(pieces):
            content = {"name": name, "offset": offset, "nbytes": nbytes, "done": i == len(pieces) - 1}
            try:
                session.send(sock, messages.DATA_PUT, content, buffers=[piece])
            except zmq.Again:
                raise TimeoutError(
                    f"the node agent's data socket at {address} took no data within "
                    f"{timeout_s:.0f}s (no agent there, or its Curve handshake "
                    "refused this client's key)"
                ) from None
            in_flight += 1
            while in_flight >= (WINDOW if i < len(pieces) - 1 else 1):
                in_flight -= _ack(session, sock, address, timeout_s)
    finally:
        sock.close(0)


def _ack(session, sock, address: str, timeout_s: float) -> int:
    if not sock.poll(timeout_s * 1000):
        raise TimeoutError(
            f"the node agent's data socket at {address} did not answer within {timeout_s:.0f}s"
        )
    msg = session.recv(sock)
    if msg is None:
        return 0
    if msg.content.get("error"):
        err = msg.content["error"]
        raise (MemoryError if err.startswith(("MemoryError", "SharedMemoryFull")) else OSError)(
            f"the node agent at {address} refused the data: {err}"
        )
    return 1
