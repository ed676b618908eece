"""Logging rejected messages without letting their senders fill the disk."""
from __future__ import annotations

import logging
import time

import zmq


class RejectLog:
    """Rejected messages, logged as one line per ``interval_s`` with their count: a peer
    without the key sent 34,600 a second, and head.log grew by 11 GiB an hour."""

    def __init__(self, logger: logging.Logger, interval_s: float = 5.0):
        self.log, self.interval_s = logger, interval_s
        self.count, self.latest = 0, None
        self._logged = -float("inf")

    def note(self, identity, error: Exception) -> None:
        self.count += 1
        self.latest = (identity[:64] if identity else identity, error)
        self.flush(due_only=True)

    def flush(self, due_only: bool = False) -> None:
        """Log what was counted (``due_only``: only when the last line is old enough)."""
        now = time.monotonic()
        if not self.count or (due_only and now - self._logged < self.interval_s):
            return
        who, why = self.latest
        if self.count == 1:
            self.log.warning("rejected a message from %r: %s", who, why)
        else:
            self.log.warning("rejected %d messages in the last %.0f s (the latest from %r: %s)",
                             self.count, min(now - self._logged, 1e9), who, why)
        self.count, self._logged = 0, now


# An unsigned notice the head sends a node agent or client whose messages it rejected
# (wrong cluster key, other protocol version): ``[REFUSED, reason]``. Never unpickled,
# only shown: the peer cannot verify a signature made with a key it does not have.
REFUSED = b"raynb-refused"


def refusal(frames: list) -> str | None:
    """The reason of a head's refusal notice, or None for any other message."""
    first = frames[0].bytes if frames and isinstance(frames[0], zmq.Frame) else (frames[0] if frames else b"")
    if first != REFUSED or len(frames) != 2:
        return None
    return (frames[1].bytes if isinstance(frames[1], zmq.Frame) else bytes(frames[1])).decode(errors="replace")[:500]
