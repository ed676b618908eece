"""Checkpoints of ranks on hosts that do not mount the run's storage: streamed to the
head, and back to a rank that resumes from one.

A rank on such a node (its agent joined without ``--shared-storage``) cannot write the
head's run directory. ``report(checkpoint=...)`` then calls :func:`upload`: over a DEALER
of its own (Curve and HMAC as every link; its small send high-water mark makes TCP's
flow control hold the rank back, never the head's loop or the worker's I/O thread, so
heartbeats and reports keep flowing), each file goes in pieces of ``PIECE_BYTES``,
and a final ``checkpoint_done`` lists every file's SHA-256. The head writes the pieces
under the run's ``.staging`` (a temporary name), checks each digest, renames the
directory to ``rank_<r>`` (atomic) and answers ``checkpoint_ack``; only then does the
report go out, naming the staged directory, and the head commits it as for any rank.

:func:`download` is the reverse, for ``get_checkpoint()`` on such a node: it asks the head
for the checkpoint's file list (sizes, SHA-256) and then for each piece in turn (one
request per piece: the rank pulls, so nothing piles up in the head's send queues), and
writes the files into a private local directory, checking every digest.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid

import zmq

from ..protocol import curve_auth as curve
from ..protocol import messages

PIECE_BYTES = 192 << 10  # under chunking.FRAME_BYTES with the message's other frames
TRANSFER_TIMEOUT_S = 60.0


class TransferError(OSError):
    """A checkpoint could not be streamed (the head said why, or did not answer)."""


class _Link:
    """A request/reply DEALER to the head for one transfer."""

    def __init__(self, worker_id: str, info: dict | None = None):
        """``info``: a client's connection info (``address``, ``key``, ``curve``); None for a
        rank, whose environment carries them."""
        key = info["key"].encode() if info else messages.key_from_env()
        self.session = messages.Session(key, validate=True)
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        messages.configure_socket(self.sock)
        self.sock.setsockopt(zmq.SNDHWM, 8)  # a few pieces in flight: TCP's pace, not memory
        self.sock.setsockopt(zmq.IDENTITY, messages.routing_id("client" if info else "transfer", worker_id))
        curve.secure_client(self.sock, info.get("curve") if info else curve.from_env())
        self.sock.connect(info["address"] if info else os.environ["RAYNB_ADDRESS"])

    def send(self, msg_type: str, content: dict, buffers=()) -> None:
        self.session.send(self.sock, msg_type, content, buffers)

    def reply(self, what: str) -> messages.Message:
        deadline = time.monotonic() + TRANSFER_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.sock.poll(max(0.0, deadline - time.monotonic()) * 1000):
                msg = self.session.recv(self.sock)
                if msg is not None:
                    if msg.msg_type == messages.ERROR:
                        raise TransferError(msg.content["message"])
                    return msg
        raise TransferError(f"the head did not answer {what} within {TRANSFER_TIMEOUT_S:.0f}s")

    def close(self) -> None:
        self.sock.close(0)


def _files(root: str) -> list[str]:
    out = []
    for d, _, names in os.walk(root, followlinks=True):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(out)


def upload(task: dict, src: str, report_index: int) -> str:
    """Stream the checkpoint directory ``src`` of this rank's report ``report_index`` to
    the head; returns the staged directory on the head (for the report event).

    Raises:
        TransferError: the head refused a piece (a disk error there names the path) or
            did not answer within ``TRANSFER_TIMEOUT_S`` seconds.
    """
    worker_id = os.environ.get("RAYNB_WORKER_ID", "")
    ident = {
        "run_id": task["run_id"],
        "rank": task["rank"],
        "attempt": task.get("attempt", 0),
        "report": report_index,
        "worker_id": worker_id,
        "transfer": uuid.uuid4().hex,
    }
    link = _Link(worker_id)
    try:
        digests = {}
        for rel in _files(src):
            h = hashlib.sha256()
            with open(os.path.join(src, rel), "rb") as f:
                offset = 0
                while True:
                    piece = f.read(PIECE_BYTES)
                    h.update(piece)
                    link.send(messages.CHECKPOINT_FILE, {**ident, "path": rel, "offset": offset}, [piece])
                    offset += len(piece)
                    if len(piece) < PIECE_BYTES:
                        break
            digests[rel] = h.hexdigest()
        link.send(messages.CHECKPOINT_DONE, {**ident, "files": digests})
        return link.reply("checkpoint_done").content["path"]
    finally:
        link.close()


def download(task: dict, dest: str) -> str:
    """Fetch the checkpoint the task resumes from into ``dest`` (created 0700); returns it.

    Raises:
        TransferError: the head refused (no such checkpoint) or a digest did not match.
    """
    worker_id = os.environ.get("RAYNB_WORKER_ID", "")
    ident = {
        "run_id": task["run_id"],
        "rank": task["rank"],
        "attempt": task.get("attempt", 0),
        "worker_id": worker_id,
        "checkpoint": task["checkpoint"],
    }
    return _pull(_Link(worker_id), ident, dest)


def download_for_client(info: dict, run_id: str, checkpoint: str, dest: str) -> str:
    """Fetch the committed checkpoint directory ``checkpoint`` (a path on the head's disk)
    of run ``run_id`` into ``dest``, for a client that cannot read the head's storage
    (``Checkpoint.to_directory`` on a laptop), over a socket of its own built from the
    client's connection ``info`` (``address``, ``key``, ``curve`` off loopback).

    Raises:
        TransferError: the head refused (no such run or checkpoint, an unsafe path), did
            not answer within ``TRANSFER_TIMEOUT_S`` seconds, or a digest did not match.
    """
    return _pull(_Link("checkpoint", info), {"run_id": run_id, "checkpoint": checkpoint}, dest)


def _pull(link: _Link, ident: dict, dest: str) -> str:
    """The file list, then every piece in turn, each file's SHA-256 checked."""
    try:
        link.send(messages.CHECKPOINT_FETCH, ident)
        listing = link.reply("checkpoint_fetch").content["files"]
        os.makedirs(dest, mode=0o700, exist_ok=True)
        for rel, (size, digest) in sorted(listing.items()):
            path = os.path.join(dest, rel)
            if not _inside(dest, path):
                raise TransferError(f"the head listed an unsafe checkpoint path {rel!r}")
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            h = hashlib.sha256()
            with open(path, "wb") as f:
                offset = 0
                while offset < size or (size == 0 and offset == 0):
                    link.send(messages.CHECKPOINT_FETCH, {**ident, "path": rel, "offset": offset})
                    piece = messages.buffer_bytes(link.reply("a checkpoint piece").buffers[0])
                    if not piece:
                        break
                    f.write(piece)
                    h.update(piece)
                    offset += len(piece)
            if h.hexdigest() != digest:
                raise TransferError(f"checkpoint file {rel} arrived corrupted (SHA-256 mismatch)")
        return dest
    finally:
        link.close()


def _inside(root: str, path: str) -> bool:
    root = os.path.abspath(root)
    return os.path.commonpath([root, os.path.abspath(path)]) == root and os.path.abspath(path) != root
