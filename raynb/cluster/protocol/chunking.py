"""Big frames travel as trains of small signed messages, so nothing big is held unverified.

ZeroMQ buffers a whole frame before the application sees any of it, and a raynb
message can only be verified once all its frames are in: with frames of up to
1 GiB, three peers without the key took the head to 2.7 GB. So no raynb socket
accepts a frame over ``FRAME_BYTES`` (``ZMQ_MAXMSGSIZE``: ZeroMQ drops the
connection as soon as a frame header announces more), and a message with a bigger
frame (a function and the data it captured, a return value) is sent as:

1. one signed ``chunk`` message per piece of each big frame, content
   ``{"transfer", "frame", "offset", "size"}`` and the piece as its only buffer;
2. the message itself, those frames left empty, with ``header["chunks"] =
   {"transfer": id, "sizes": {frame index: bytes}}``.

Each piece is verified (it is a signed message) before it is kept, so only a key
holder's data is ever buffered, and never more than the message limit per sender.
Frame indices count from the header (1 is the content, 2 the first buffer).
"""
from __future__ import annotations

import uuid
from collections import OrderedDict

import zmq

# The largest frame any raynb socket accepts (bytes). Control messages are far smaller.
FRAME_BYTES = 256 << 10
# Senders with a transfer under way that a receiver keeps; the oldest is dropped first.
MAX_SENDERS = 256


def view(frame) -> memoryview:
    """A byte view of a frame (zmq.Frame, bytes, bytearray, memoryview), without a copy."""
    buf = frame.buffer if isinstance(frame, zmq.Frame) else memoryview(frame)
    return buf.cast("B") if buf.format != "B" or buf.ndim != 1 else buf


def split(frames: list, frame_bytes: int) -> tuple[list, list[tuple[dict, memoryview]], dict | None]:
    """Cut ``frames`` (content and buffers; index 1 is the content) for sending.

    Returns:
        (the frames with each big one emptied, [(chunk content, piece)], the
        ``chunks`` header field, or None when no frame is over ``frame_bytes``).
    """
    big = [j for j, f in enumerate(frames) if len(view(f)) > frame_bytes]
    if not big:
        return frames, [], None
    transfer, out, sizes, frames = uuid.uuid4().hex, [], {}, list(frames)
    for j in big:
        data = view(frames[j])
        sizes[str(j + 1)] = len(data)
        for off in range(0, len(data), frame_bytes):
            out.append(({"transfer": transfer, "frame": j + 1, "offset": off, "size": len(data)},
                        data[off:off + frame_bytes]))
        frames[j] = b""
    return frames, out, {"transfer": transfer, "sizes": sizes}


def _int(value, what: str, low: int = 0, high: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        raise ValueError(f"chunk {what} {value!r} is not an integer in [{low}, {high}]")
    return value


class Reassembly:
    """The frames of chunked messages being put back together, by sender session."""

    def __init__(self, max_senders: int = MAX_SENDERS):
        self._open: OrderedDict[str, tuple[str, dict[int, list]]] = OrderedDict()
        self._max_senders = max_senders
        self.pieces = 0  # kept so far, all senders (a receiver sees from it that one came)

    def add(self, sender: str, content: dict, piece, limit: int) -> None:
        """Keep one verified piece. Raises ValueError for one that does not fit."""
        transfer = content.get("transfer") if isinstance(content, dict) else None
        if not isinstance(transfer, str):
            raise ValueError("chunk without a transfer id")
        frame = _int(content.get("frame"), "frame", 1, 1 << 16)
        size = _int(content.get("size"), "size", 0, limit)
        offset = _int(content.get("offset"), "offset", 0, size)
        data = view(piece)
        current = self._open.get(sender)
        if current is None or current[0] != transfer:
            # One sender sends one message at a time: a new transfer ends the last one.
            current = self._open[sender] = (transfer, {})
            self._open.move_to_end(sender)
            while len(self._open) > self._max_senders:
                self._open.popitem(last=False)
        frames = current[1]
        if frame not in frames:
            if sum(len(b) for b, _ in frames.values()) + size > limit:
                raise ValueError(f"chunked message over the {limit}-byte limit")
            frames[frame] = [bytearray(size), 0]
        buf, filled = frames[frame]
        if len(buf) != size or offset != filled or offset + len(data) > size:
            raise ValueError(f"chunk out of order: frame {frame} offset {offset} (have {filled} of {len(buf)})")
        buf[offset:offset + len(data)] = data
        frames[frame][1] = offset + len(data)
        self.pieces += 1

    def take(self, sender: str, chunks, rest: list) -> list:
        """``rest`` (the frames after the signature) with the chunked frames filled in.

        Raises ValueError when the pieces announced by ``chunks`` did not all arrive."""
        if not isinstance(chunks, dict) or not isinstance(chunks.get("sizes"), dict):
            raise ValueError("malformed chunks header")
        current = self._open.pop(sender, None)
        if current is None or current[0] != chunks.get("transfer"):
            raise ValueError("chunked message whose pieces did not arrive")
        frames, rest = current[1], list(rest)
        want = {}
        for key, size in chunks["sizes"].items():
            if not str(key).isdigit():
                raise ValueError(f"malformed chunks header: frame {key!r}")
            want[int(key)] = size
        if set(want) != set(frames) or any(not 1 <= j < len(rest) for j in want):
            raise ValueError("chunked message whose frames do not match its pieces")
        for j, size in want.items():
            buf, filled = frames[j]
            if filled != size or len(buf) != size or len(view(rest[j])):
                raise ValueError(f"chunked frame {j} incomplete: {filled} of {size} bytes")
            rest[j] = buf
        return rest
