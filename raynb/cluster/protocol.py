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
  each prefixed by its length (Jupyter's wire protocol signs only the header
  dicts; signing the buffers too means a tampered payload is never unpickled).

Replays are rejected twice over: a bounded history of recent digests (as
``jupyter_client.session`` keeps), and a per-sender sequence number that must
grow, which still catches a replay once its digest has aged out of the history.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import pickle
import struct
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

import zmq

PROTOCOL_VERSION = "1.0"

log = logging.getLogger("raynb.protocol")

# Message types, by direction. Any type not listed here is rejected on receipt.
# client -> head
HELLO = "hello"                  # {"role": "client"|"node"|"worker", ...}
SUBMIT_RUN = "submit_run"        # run spec; buffers[0] = cloudpickled (fn, config)
CANCEL_RUN = "cancel_run"        # {"run_id", "reason"?: "stop" (a Tune STOP: the run ends STOPPED)}
STATUS_REQUEST = "status_request"
SHUTDOWN = "shutdown"            # stop the whole cluster
PING = "ping"
LIST_RUNS = "list_runs"          # {}: every run the head knows (live and from disk)
GET_RUN = "get_run"              # {"name"}: one run's record
ATTACH_RUN = "attach_run"        # {"name"}: its record now, then its events until it ends
# head -> client
HELLO_REPLY = "hello_reply"
RUN_ACCEPTED = "run_accepted"    # {"run_id", "name", "path", "ranks": [...]}
RUN_EVENT = "run_event"          # {"run_id", "event": {...}} (progress pane events)
RUN_DONE = "run_done"            # {"run_id", "state", "error", ...}; buffers[0] = rank 0 return value
STATUS_REPLY = "status_reply"
ERROR = "error"                  # {"message"}: a request the head refused
PONG = "pong"                    # also the head's answer to a node's stats
RUNS_REPLY = "runs_reply"        # {"runs": [summary, ...]}
RUN_RECORD = "run_record"        # {"record": {...}}: answer to get_run / attach_run
# node agent -> head
NODE_REGISTER = "node_register"  # {"node_id", ..., "num_workers", "max_workers", "gpus", "cpus"}
WORKER_EXITED = "worker_exited"  # {"worker_id", "pid", "exitcode", "signal", "reason"?}
NODE_STATS = "node_stats"        # {"workers": {worker_id: {"pid", "cpu_percent", "rss", "status"}},
                                 #  "zygote_pid", "note"}
# head -> node agent
SPAWN_WORKERS = "spawn_workers"  # {"count"}
KILL_WORKER = "kill_worker"      # {"worker_id", "signal"}: to the worker's whole process group
RETIRE_WORKER = "retire_worker"  # {"worker_id"}: an idle worker beyond the warm count; SIGTERM
# worker -> head
WORKER_READY = "worker_ready"    # {"worker_id", "pid", "node_id", "hostname", "cpu_percent", "rss"}
WORKER_ALIVE = "worker_alive"    # {}: the I/O thread's heartbeat, every worker.HEARTBEAT_S
TASK_EVENT = "task_event"        # {"run_id", "rank", "event"}: report / output
TASK_DONE = "task_done"          # {"run_id", "rank", "status", "error"}; buffers[0] = return value
# head -> worker
RUN_TASK = "run_task"            # {"run_id", "rank", ..., "group", "num_threads"}; buffers[0] = the function
CANCEL_TASK = "cancel_task"      # {"run_id"}
SET_THREADS = "set_threads"      # {"run_id", "attempt", "num_threads"}: a new share of the node's cores

MESSAGE_TYPES = frozenset(
    v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, str)
    and k not in ("PROTOCOL_VERSION",)
)

# Frames larger than this are refused by ZeroMQ itself before reaching Python
# (ZMQ_MAXMSGSIZE), so a hostile peer cannot make the head allocate without bound.
DEFAULT_MAX_MESSAGE_BYTES = 1 << 30
# How long a signed message stays acceptable (seconds); older ones are replays or
# come from a clock too far off to trust.
MAX_MESSAGE_AGE_S = 300.0


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

    Not thread-safe: give each thread that owns a socket its own ``Session``.
    """

    def __init__(self, key: bytes, history_size: int = 65536):
        if not key:
            raise ValueError("raynb needs a non-empty cluster key; messages are always signed")
        self.key = key if isinstance(key, bytes) else key.encode()
        self.session_id = uuid.uuid4().hex
        self._seq = 0
        self._history: OrderedDict[bytes, None] = OrderedDict()
        self._history_size = history_size
        self._last_seq: dict[str, int] = {}
        self.rejected = 0  # messages dropped for a bad signature, replay or bad framing

    # -- signing --------------------------------------------------------------
    def _digest(self, frames) -> bytes:
        h = hmac.new(self.key, digestmod=hashlib.sha256)
        for f in frames:
            buf = f.buffer if isinstance(f, zmq.Frame) else f
            h.update(struct.pack("<Q", len(buf)))
            h.update(buf)
        return h.hexdigest().encode()

    def serialize(self, msg_type: str, content: dict | None = None, buffers=()) -> list:
        """The signed frames for a message (without any routing identity)."""
        if msg_type not in MESSAGE_TYPES:
            raise ValueError(f"unknown raynb message type {msg_type!r}")
        self._seq += 1
        header = json.dumps({
            "version": PROTOCOL_VERSION,
            "msg_type": msg_type,
            "msg_id": uuid.uuid4().hex,
            "session": self.session_id,
            "seq": self._seq,
            "time": time.time(),
        }).encode()
        body = pickle.dumps(content or {}, protocol=5)
        frames = [header, body, *buffers]
        return [self._digest(frames), *frames]

    def send(self, sock: zmq.Socket, msg_type: str, content: dict | None = None,
             buffers=(), identity: bytes | None = None) -> None:
        frames = self.serialize(msg_type, content, buffers)
        if identity is not None:
            frames.insert(0, identity)
        sock.send_multipart(frames, copy=False)

    # -- verifying ------------------------------------------------------------
    def deserialize(self, frames: list, identity: bytes | None = None) -> Message:
        """Verify and decode frames (signature first). Raises ProtocolError."""
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
            header = json.loads(hdr_raw)
            msg_type, session, seq, sent = (
                header["msg_type"], header["session"], int(header["seq"]), float(header["time"]))
        except (ValueError, KeyError, TypeError) as e:
            raise ProtocolError(f"malformed header: {e}") from None
        if header.get("version", "").split(".")[0] != PROTOCOL_VERSION.split(".")[0]:
            raise ProtocolError(
                f"protocol version {header.get('version')!r} does not match {PROTOCOL_VERSION!r}: "
                "upgrade raynb so client, head and nodes run the same version")
        if msg_type not in MESSAGE_TYPES:
            raise ProtocolError(f"unknown message type {msg_type!r}")
        if seq <= self._last_seq.get(session, 0):
            raise ProtocolError("replayed message (sequence number did not grow)")
        if abs(time.time() - sent) > MAX_MESSAGE_AGE_S:
            raise ProtocolError("message timestamp outside the accepted window")
        self._remember(sig)
        self._last_seq[session] = seq
        body = rest[1].bytes if isinstance(rest[1], zmq.Frame) else rest[1]
        content = pickle.loads(body)  # safe: signed by a holder of the cluster key
        return Message(msg_type, content, list(rest[2:]), header, identity)

    def _remember(self, digest: bytes) -> None:
        self._history[digest] = None
        if len(self._history) > self._history_size:
            self._history.popitem(last=False)

    def recv(self, sock: zmq.Socket, router: bool = False) -> Message | None:
        """Receive one message; returns None (and counts it) when it fails verification."""
        frames = sock.recv_multipart(copy=False)
        identity = None
        if router:
            identity = frames[0].bytes
            frames = frames[1:]
        try:
            return self.deserialize(frames, identity)
        except ProtocolError as e:
            self.rejected += 1
            log.warning("rejected message from %r: %s", identity, e)
            return None
        except Exception as e:  # noqa: BLE001 - a hostile payload must never crash the receiver
            self.rejected += 1
            log.warning("rejected undecodable message from %r: %s", identity, e)
            return None


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
    """The largest message any raynb socket accepts (``$RAYNB_MAX_MESSAGE_BYTES``, bytes)."""
    try:
        return int(os.environ.get("RAYNB_MAX_MESSAGE_BYTES", DEFAULT_MAX_MESSAGE_BYTES))
    except ValueError:
        return DEFAULT_MAX_MESSAGE_BYTES


def buffer_bytes(buf) -> bytes:
    """The bytes of a received buffer frame (zmq.Frame or bytes)."""
    return buf.bytes if isinstance(buf, zmq.Frame) else bytes(buf)


def configure_socket(sock: zmq.Socket, limit: int | None = None) -> None:
    """Options every raynb socket gets: no lingering on close, bounded message size."""
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, limit or max_message_bytes())


def key_from_env() -> bytes:
    key = os.environ.get("RAYNB_KEY", "")
    if not key:
        raise RuntimeError("RAYNB_KEY is not set: raynb processes get the cluster key from "
                           "their parent or from the connection file")
    return key.encode()
