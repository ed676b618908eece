"""The forks a head asked a node agent for, and where they stand.

The head asks for a killed rank's replacement (``spawn_workers``) in the message right
after its ``kill_worker``, before the worker's exit frees its room, and counts the
fork as in flight until the new worker is ready. A request the agent dropped for lack
of room was waited for forever, and with it a run that needed that worker. So what
finds no room waits here for the next exit.
"""
from __future__ import annotations


class ForkRequests:
    """``wanted``: forks asked for that wait for room; ``in_flight``: forks the zygote was
    told to make that have not reported ``spawned`` yet."""

    def __init__(self) -> None:
        self.wanted = 0
        self.in_flight = 0

    def ask(self, count: int) -> None:
        self.wanted += max(0, count)

    def take(self, max_workers: int, alive: int) -> int:
        """How many to fork now, with ``alive`` workers of at most ``max_workers``."""
        n = max(0, min(self.wanted, max_workers - alive - self.in_flight))
        self.wanted -= n
        self.in_flight += n
        return n

    def spawned(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)

    def zygote_started(self) -> None:
        self.in_flight = 0  # what an earlier zygote was told to fork died with it
