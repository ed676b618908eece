"""The forks a head asked a node agent for, and where they stand.

The head asks for a killed rank's replacement (``spawn_workers``) in the message right
after its ``kill_worker``, before the worker's exit frees its room, and counts the
fork as in flight until the new worker is ready. A request the agent dropped for lack
of room was waited for forever, and with it a run that needed that worker. So what
finds no room waits here for the next exit. Each fork is of a kind (``torch``, or one
of ``kind_zygote.KINDS``), kept in the order asked.
"""

from __future__ import annotations

from collections import deque


class ForkRequests:
    """``wanted``: forks asked for that wait for room; ``in_flight``: forks the zygote was
    told to make that have not reported ``spawned`` yet."""

    def __init__(self) -> None:
        self._wanted: deque = deque()  # the kind of each fork asked for, in order
        self.in_flight = 0

    @property
    def wanted(self) -> int:
        return len(self._wanted)

    def ask(self, count: int, kind: str = "torch") -> None:
        self._wanted.extend([kind] * max(0, count))

    def take(self, max_workers: int, alive: int) -> list[str]:
        """The kinds of the forks to make now, with ``alive`` workers of at most ``max_workers``."""
        n = max(0, min(len(self._wanted), max_workers - alive - self.in_flight))
        self.in_flight += n
        return [self._wanted.popleft() for _ in range(n)]

    def spawned(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)

    def zygote_started(self) -> None:
        self.in_flight = 0  # what an earlier zygote was told to fork died with it
