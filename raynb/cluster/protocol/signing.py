"""What a message's HMAC covers, so a payload sent to many peers is hashed once.

A signature is ``HMAC-SHA256(key, ...)`` over every frame of the message, each
prefixed with its length (``protocol.Session``). A frame up to ``DIGEST_OVER`` bytes
is fed as it is; a bigger one is fed as its SHA-256. The HMAC then binds the frame
as firmly (forging it needs a SHA-256 second preimage), and the sender can compute
that SHA-256 once for all the messages that carry the same bytes: the head sends a
run's function to every rank of every attempt, each time cut into the same pieces
(``chunking``), and signs each piece's digest instead of hashing the piece anew.
The receiver hashes what it received once, as it did before.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

import zmq

# Frames over this size (bytes) are signed by their SHA-256.
DIGEST_OVER = 64 << 10


def frame_view(frame) -> memoryview:
    return frame.buffer if isinstance(frame, zmq.Frame) else memoryview(frame)


# One keyed HMAC per key (a process has one or two), copied for each message: keying
# anew makes OpenSSL 3 look the digest up again on every message. Where the stdlib's
# ``hmac.HMAC`` wraps OpenSSL's object (``_hmac``), that object is kept: its copy,
# update and hexdigest are C calls, without the wrapper's Python frame around each.
_KEYED: dict[bytes, object] = {}
_LENGTH = struct.Struct("<Q").pack


def _keyed(key: bytes):
    h = _KEYED.get(key)
    if h is None:
        if len(_KEYED) > 8:
            _KEYED.clear()
        h = hmac.new(key, digestmod=hashlib.sha256)
        h = _KEYED[key] = getattr(h, "_hmac", None) or h
    return h


def sign(key: bytes, frames, known: dict | None = None) -> bytes:
    """The hex HMAC of ``frames``; ``known`` maps a frame's index to its SHA-256 when
    the sender has it already (``Payload``)."""
    h = _keyed(key).copy()
    update = h.update
    for i, f in enumerate(frames):
        buf = frame_view(f)
        n = buf.nbytes
        update(_LENGTH(n))
        if n > DIGEST_OVER:
            update((known or {}).get(i) or hashlib.sha256(buf).digest())
        else:
            update(buf)
    return h.hexdigest().encode()


class Payload(list):
    """A message's buffers (a run's function and what it captured), with the SHA-256 of
    each piece computed once however many messages carry them (``Session.messages``
    reads ``digest``). Dropping the list drops the digests."""

    def __init__(self, buffers=()):
        super().__init__(buffers)
        self._digests: dict[tuple[int, int, int], bytes] = {}

    def digest(self, index: int, offset: int, piece) -> bytes:
        """The SHA-256 of ``piece``: bytes ``offset`` on of buffer ``index``."""
        key = (index, offset, frame_view(piece).nbytes)
        d = self._digests.get(key)
        if d is None:
            d = self._digests[key] = hashlib.sha256(frame_view(piece)).digest()
        return d
