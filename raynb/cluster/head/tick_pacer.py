"""When the head's tick runs: every ``TICK_S`` while idle, at most every ``TICK_MIN_S``
while messages come back to back.

Everything a tick does is timed (grace periods, the idle stop, a run's batched files, the
node agents' heartbeats), so nothing is late by running it less often than after every
drain of the socket: a warm re-run drains it three times, and ticking after each cost the
head more than the rest of those drains. A tick put off is owed: the next poll waits no
longer than until it is due.
"""

from __future__ import annotations

import math

# Messages arriving back to back tick the head at most this often (s).
TICK_MIN_S = 0.005


class TickPacer:
    """Args: idle_s (float): the poll's timeout with no tick owed (the head's ``TICK_S``)."""

    def __init__(self, idle_s: float):
        self.idle_ms = round(idle_s * 1000)
        self.next_tick = 0.0  # monotonic s
        self.owed = False  # a drain came before the tick was due

    def poll_ms(self, now: float) -> int:
        """How long to wait for a message (ms): until an owed tick is due, rounded up
        (pyzmq takes whole ms, and a 0 ms poll would return at once and spin until then)."""
        return math.ceil(max(0.0, self.next_tick - now) * 1000) if self.owed else self.idle_ms

    def due(self, now: float) -> bool:
        """Whether to tick now (the next one is then ``TICK_MIN_S`` away); False owes it."""
        self.owed = now < self.next_tick
        if not self.owed:
            self.next_tick = now + TICK_MIN_S
        return not self.owed
