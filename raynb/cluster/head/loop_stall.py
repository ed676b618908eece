"""The head's own stalls, told apart from its peers' silence.

The head judges node agents and workers by how long it has not heard from them
(``last_seen``): a node silent past its timeout is lost, a worker is shown as not
responding. When the head itself could not listen (its process was stopped, the
machine starved it, a step of its loop was slow) their messages wait in its socket, and
the silence it measures is its own. :class:`LoopWatch` measures the loop's gaps (a poll
that returned much later than its timeout, or a drain and tick that took long); after
one, every peer's ``last_seen`` is moved to the moment the loop resumed, so a peer is
judged only on what it did while the head listened, and ``head.log`` says the head
stalled instead of blaming the ranks.
"""
from __future__ import annotations

import logging

log = logging.getLogger("raynb.head")

# A gap of the loop longer than this (s) is a stall of the head's, not of its peers.
STALL_S = 1.0


class LoopWatch:
    """Where the loop is: call :meth:`polling` before each poll and :meth:`polled` after."""

    def __init__(self, stall_s: float = STALL_S):
        self.stall_s = stall_s
        self._poll_start: float | None = None
        self._poll_timeout_s = 0.0
        self._busy_since: float | None = None
        self.stalls = 0           # how many stalls were seen
        self.longest_s = 0.0      # the longest (s)

    def polling(self, now: float, timeout_ms: float) -> float | None:
        """Before a poll of ``timeout_ms``; returns the stall (s) since the last poll
        returned (a drain and tick that took long), or None."""
        gap = now - self._busy_since if self._busy_since is not None else 0.0
        self._poll_start, self._poll_timeout_s = now, timeout_ms / 1000
        return self._stall(gap)

    def polled(self, now: float) -> float | None:
        """After the poll returned; returns how much later than its timeout it returned
        (s: the process was stopped or starved), or None."""
        self._busy_since = now
        if self._poll_start is None:
            return None
        return self._stall(now - self._poll_start - self._poll_timeout_s)

    def _stall(self, gap: float) -> float | None:
        if gap <= self.stall_s:
            return None
        self.stalls += 1
        self.longest_s = max(self.longest_s, gap)
        return gap


def discount(registry, gap: float, now: float) -> None:
    """After a stall of ``gap`` s that ended at ``now`` (monotonic): no peer is held to
    the silence the head caused."""
    for node in registry.nodes.values():
        node.last_seen = max(node.last_seen, now)
    for w in registry.workers.values():
        w.last_seen = max(w.last_seen, now)
    log.warning("the head's loop stalled for %.1fs (its process was stopped or starved, or a step "
                "was slow); the node agents' and workers' silence during it is not held against them",
                gap)
