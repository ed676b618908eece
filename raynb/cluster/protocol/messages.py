"""The wire protocol: every message type raynb sends, how it is framed and signed.

A message on the wire is a list of ZeroMQ frames::

    [signature, header, content, *buffers]

- ``header``: JSON with the protocol version, message type, message id, the
  sender's session id, a per-session sequence number and a timestamp.
- ``content``: a pickle of plain Python values (dicts, lists, numbers, strings).
  Only raynb's own processes produce it, and it is unpickled only after the
  signature checks out.
- ``buffers``: opaque byte frames, forwarded without being touched. User code
  and user data (cloudpickled functions, results) travel here, so the head never
  unpickles anything a notebook wrote.
- ``signature``: HMAC-SHA256, with the cluster key, over *every* following frame,
  each prefixed by its length, a frame over 64 KiB by its SHA-256 (``signing``: a
  payload sent to many ranks is hashed once). Jupyter's wire protocol signs only the
  header dicts; signing the buffers too means a tampered payload is never unpickled.

Replays are rejected twice over: a bounded history of recent digests (as
``jupyter_client.session`` keeps), and a per-sender sequence number that must
grow, which still catches a replay once its digest has aged out of the history.

No socket accepts a frame over ``chunking.FRAME_BYTES``: a bigger one is sent as a
train of signed ``chunk`` messages, each verified before it is kept (see
``chunking``), so no big frame is ever buffered before it is authenticated.

Every message type is declared once, in ``catalog`` (fields, direction, version); its
constants here, ``MESSAGE_TYPES`` and ``SCHEMAS`` are derived from it. A verified
message's content is checked against its type's entry in ``SCHEMAS`` (``schema``)
before any handler sees it: a key holder's malformed message is
dropped and counted as a forged one is.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import pickle
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

import zmq

from .. import settings
from . import catalog, chunking, signing
from .catalog import PROTOCOL_VERSION
from .declaration import constants, schemas
from .framing import recv_frames, send_frames
from .rejects import RejectLog
from .schema import Record

log = logging.getLogger("raynb.protocol")

# Every message type, from its one declaration (``catalog``): ``HELLO = "hello"`` ... as
# names of this module. Any type not declared there is rejected on receipt.
_TYPES = constants(catalog.MESSAGES)
globals().update(_TYPES)
_CHUNK = _TYPES["CHUNK"]
MESSAGE_TYPES = frozenset(_TYPES.values())

# What each message's content holds (``schema``), checked on receipt before any handler.
SCHEMAS: dict[str, Record] = schemas(catalog.MESSAGES)
JOB_SCHEMAS = {m.name: SCHEMAS[m.name] for m in catalog.MESSAGES if m.topic == catalog.JOBS and m.checked}
TRANSFER_SCHEMAS = {
    m.name: SCHEMAS[m.name] for m in catalog.MESSAGES if m.topic == catalog.TRANSFERS and m.checked
}
_ANY = Record()  # a dict, whatever its fields


# The most one message may carry, all its frames together (bytes): what a receiver
# reassembles from a key holder's chunks at most. Frames themselves are small
# (chunking.FRAME_BYTES, refused by ZeroMQ before reaching Python when larger).
DEFAULT_MAX_MESSAGE_BYTES = 1 << 30
# How long a signed message stays acceptable (seconds); older ones are replays or
# come from a clock too far off to trust.
MAX_MESSAGE_AGE_S = 300.0
# How long recv() waits for the next piece of a chunked message before giving up (s).
TRAIN_WAIT_S = 30.0


class ProtocolError(Exception):
    """A message failed verification or decoding; it was dropped, never executed."""


@dataclass
class Message:
    """A decoded, verified message."""

    msg_type: str
    content: dict
    buffers: list = field(default_factory=list)
    header: dict = field(default_factory=dict)
    identity: bytes | None = None  # the sender's routing id, on ROUTER sockets


def new_key() -> bytes:
    """A fresh random cluster key (32 bytes, hex-encoded so it fits in JSON)."""
    return uuid.uuid4().hex.encode() + uuid.uuid4().hex.encode()


class Session:
    """Signs outgoing and verifies incoming messages for one socket-owning thread.

    Args:
        key: the cluster's HMAC key (bytes). An empty key is refused: raynb never
            runs unauthenticated.
        history_size: how many recent digests to remember for replay detection.
        frame_bytes: frames over this are sent chunked (see ``chunking``).
        validate: reject a received message whose content does not match its type's
            ``SCHEMAS`` entry (every raynb process sets it).

    Not thread-safe: give each thread that owns a socket its own ``Session``.
    """

    def __init__(
        self,
        key: bytes,
        history_size: int = 65536,
        frame_bytes: int = chunking.FRAME_BYTES,
        validate: bool = False,
    ):
        if not key:
            raise ValueError("raynb needs a non-empty cluster key; messages are always signed")
        self.key = key if isinstance(key, bytes) else key.encode()
        self.session_id = uuid.uuid4().hex
        self._seq = 0
        self._history: OrderedDict[bytes, None] = OrderedDict()
        self._history_size = history_size
        self._last_seq: dict[str, int] = {}
        self.rejected = 0  # messages dropped: bad signature, replay, framing or fields
        self.frame_bytes = frame_bytes
        self.validate = validate
        self.max_bytes = max_message_bytes()
        self._chunks = chunking.Reassembly()
        self.rejects = RejectLog(log)

    # -- signing --------------------------------------------------------------
    def _digest(self, frames, known: dict | None = None) -> bytes:
        return signing.sign(self.key, frames, known)

    def serialize(self, msg_type: str, content: dict | None = None, buffers=()) -> list:
        """The signed frames for a message (without any routing identity), as one
        message: see :meth:`messages` for one with frames over ``frame_bytes``."""
        if msg_type not in MESSAGE_TYPES:
            raise ValueError(f"unknown raynb message type {msg_type!r}")
        return self._signed(msg_type, pickle.dumps(content or {}, protocol=5), buffers)

    def _signed(self, msg_type: str, body, buffers, chunks: dict | None = None, known=None) -> list:
        self._seq += 1
        seq, sid = self._seq, self.session_id  # msg_id is unique as (session, seq): no urandom
        if chunks is None:  # what json.dumps writes, without its encoder (the names are hex and types)
            header = (
                f'{{"version": "{PROTOCOL_VERSION}", "msg_type": "{msg_type}", "msg_id": "{sid}:{seq}", '
                f'"session": "{sid}", "seq": {seq}, "time": {time.time()!r}}}'
            )
        else:
            header = json.dumps(
                {
                    "version": PROTOCOL_VERSION,
                    "msg_type": msg_type,
                    "msg_id": f"{sid}:{seq}",
                    "session": sid,
                    "seq": seq,
                    "time": time.time(),
                    "chunks": chunks,
                }
            )
        frames = [header.encode(), body, *buffers]
        return [self._digest(frames, known), *frames]

    def messages(self, msg_type: str, content: dict | None = None, buffers=()) -> list[list]:
        """The signed messages that carry one message: a train of ``chunk`` messages
        for each frame over ``frame_bytes``, then the message itself."""
        if msg_type not in MESSAGE_TYPES:
            raise ValueError(f"unknown raynb message type {msg_type!r}")
        frames = [pickle.dumps(content or {}, protocol=5), *buffers]
        frames, pieces, chunks = chunking.split(frames, self.frame_bytes)
        # A Payload's pieces are hashed once for every message that carries them (signing).
        known = (
            (lambda c, piece: {2: buffers.digest(c["frame"], c["offset"], piece)})
            if isinstance(buffers, signing.Payload)
            else (lambda c, piece: None)
        )
        out = [
            self._signed(_CHUNK, pickle.dumps(c, protocol=5), [piece], known=known(c, piece))
            for c, piece in pieces
        ]
        out.append(self._signed(msg_type, frames[0], frames[1:], chunks))
        return out

    def send(
        self,
        sock: zmq.Socket,
        msg_type: str,
        content: dict | None = None,
        buffers=(),
        identity: bytes | None = None,
    ) -> None:
        self._put(sock, self.messages(msg_type, content, buffers), identity)

    def send_each(self, sock: zmq.Socket, msg_type: str, items, buffers=()) -> None:
        """Send ``msg_type`` on a ROUTER to each ``(identity, content)`` of ``items``, all
        signed before the first goes out: a run's ranks get their tasks close together."""
        ready = [(identity, self.messages(msg_type, content, buffers)) for identity, content in items]
        for identity, messages in ready:
            try:
                self._put(sock, messages, identity)
            except zmq.ZMQError as e:  # the others still get theirs
                log.warning("could not send %s to %r: %s", msg_type, identity, e)

    @staticmethod
    def _put(sock: zmq.Socket, messages: list, identity: bytes | None) -> None:
        for frames in messages:
            send_frames(sock, frames if identity is None else [identity, *frames])

    # -- verifying ------------------------------------------------------------
    def deserialize(self, frames: list, identity: bytes | None = None) -> Message | None:
        """Verify and decode frames (signature first).

        Returns:
            The message, or None for a ``chunk`` (kept until its message arrives).

        Raises:
            ProtocolError: the message was dropped (the text says why).
        """
        if len(frames) < 3:
            raise ProtocolError(f"truncated message: {len(frames)} frames, need at least 3")
        sig = frames[0].bytes if isinstance(frames[0], zmq.Frame) else frames[0]
        rest = frames[1:]
        if not hmac.compare_digest(sig, self._digest(rest)):
            raise ProtocolError("bad or missing signature")
        if sig in self._history:
            raise ProtocolError("replayed message (digest seen before)")
        hdr_raw = rest[0].bytes if isinstance(rest[0], zmq.Frame) else rest[0]
        try:
            header = json.loads(bytes(hdr_raw).decode())  # str: json skips detect_encoding
            msg_type, session, seq, sent = (
                header["msg_type"],
                header["session"],
                int(header["seq"]),
                float(header["time"]),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ProtocolError(f"malformed header: {e}") from None
        if header.get("version", "").split(".")[0] != PROTOCOL_VERSION.split(".")[0]:
            raise ProtocolError(
                f"protocol version {header.get('version')!r} does not match {PROTOCOL_VERSION!r}: "
                "upgrade raynb so client, head and nodes run the same version"
            )
        if msg_type not in MESSAGE_TYPES:
            raise ProtocolError(f"unknown message type {msg_type!r}")
        if seq <= self._last_seq.get(session, 0):
            raise ProtocolError("replayed message (sequence number did not grow)")
        if abs(time.time() - sent) > MAX_MESSAGE_AGE_S:
            raise ProtocolError("message timestamp outside the accepted window")
        self._remember(sig)
        self._last_seq[session] = seq
        try:
            if msg_type == _CHUNK:
                self._chunks.add(
                    session,
                    pickle.loads(chunking.view(rest[1])),
                    rest[2] if len(rest) > 2 else b"",
                    self.max_bytes,
                )
                return None
            if "chunks" in header:
                rest = self._chunks.take(session, header["chunks"], rest)
        except ValueError as e:
            raise ProtocolError(str(e)) from None
        content = pickle.loads(chunking.view(rest[1]))  # safe: signed by a holder of the cluster key
        if self.validate:
            bad = SCHEMAS.get(msg_type, _ANY).problem(content)
            if bad:
                raise ProtocolError(f"malformed {msg_type}: {bad}")
        return Message(msg_type, content, list(rest[2:]), header, identity)

    def _remember(self, digest: bytes) -> None:
        self._history[digest] = None
        if len(self._history) > self._history_size:
            self._history.popitem(last=False)

    def accept(self, frames: list, identity: bytes | None = None) -> Message | None:
        """:meth:`deserialize`, but a rejected message is counted and logged (at most
        one line every few seconds) instead of raised: None for it, as for a chunk."""
        try:
            return self.deserialize(frames, identity)
        except Exception as e:  # noqa: BLE001 - a hostile payload must never crash the receiver
            self.rejected += 1
            self.rejects.note(identity, e)
            return None

    def recv(self, sock: zmq.Socket, router: bool = False) -> Message | None:
        """Receive one message (the whole train, for a chunked one); returns None (and
        counts it) when it fails verification, or when a train stops midway."""
        while True:
            frames = recv_frames(sock)
            identity = None
            if router:
                identity = frames[0].bytes
                frames = frames[1:]
            before = self._chunks.pieces
            msg = self.accept(frames, identity)
            if msg is not None or self._chunks.pieces == before or not sock.poll(TRAIN_WAIT_S * 1000):
                return msg


def routing_id(role: str, name: str = "") -> bytes:
    """A socket's routing id: ``role:name:<random>``.

    The random part makes ids unguessable, so a peer without the key cannot
    connect under a worker's id to take (or block) its route to the head.
    """
    return f"{role}:{name}:{uuid.uuid4().hex[:16]}".encode()


def routing_name(identity: bytes) -> str:
    """The ``name`` part of a routing id made by :func:`routing_id`."""
    parts = identity.decode(errors="replace").split(":")
    return parts[1] if len(parts) >= 3 else ""


def max_message_bytes() -> int:
    """The most one message may carry, its frames together (``$RAYNB_MAX_MESSAGE_BYTES``, bytes)."""
    return settings.get("RAYNB_MAX_MESSAGE_BYTES")  # not a positive int: the default


def buffer_bytes(buf) -> bytes:
    """The bytes of a received buffer frame (zmq.Frame or bytes)."""
    return buf.bytes if isinstance(buf, zmq.Frame) else bytes(buf)


def configure_socket(sock: zmq.Socket, limit: int | None = None) -> None:
    """Options every raynb socket gets: no lingering on close, small frames only
    (``limit``, default ``chunking.FRAME_BYTES``; a peer sending more is dropped)."""
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, limit or chunking.FRAME_BYTES)


def key_from_env() -> bytes:
    key = os.environ.get("RAYNB_KEY", "")
    if not key:
        raise RuntimeError(
            "RAYNB_KEY is not set: raynb processes get the cluster key from "
            "their parent or from the connection file"
        )
    return key.encode()
