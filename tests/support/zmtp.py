"""Raw ZMTP 3.0 frames, for tests that speak to a head's socket without pyzmq (an attacker's
view of the wire: a greeting and a READY command, as a client would send them)."""

from __future__ import annotations

import struct


def zmtp_greeting() -> bytes:
    """A ZMTP 3.0 greeting, NULL mechanism, as a client."""
    return b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31


def zmtp_ready(socket_type=b"DEALER", identity=b"") -> bytes:
    def prop(name: bytes, value: bytes) -> bytes:
        return bytes([len(name)]) + name + struct.pack(">I", len(value)) + value

    body = b"\x05READY" + prop(b"Socket-Type", socket_type) + prop(b"Identity", identity)
    return bytes([0x04, len(body)]) + body
