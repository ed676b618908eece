"""A node agent's forks asked for keep their kind and their order while they wait for room."""

from __future__ import annotations

from raynb.cluster.node.fork_requests import ForkRequests


def test_forks_wait_for_room_in_order_with_their_kind():
    forks = ForkRequests()
    forks.ask(1)
    forks.ask(2, "tensorflow")
    assert forks.wanted == 3
    assert forks.take(max_workers=4, alive=2) == ["torch", "tensorflow"]  # room for two
    assert forks.take(max_workers=4, alive=2) == []  # those two in flight fill it
    forks.spawned()
    assert forks.take(max_workers=4, alive=3) == []  # spawned: alive now
    assert forks.take(max_workers=4, alive=2) == ["tensorflow"]  # a worker exited
    assert forks.wanted == 0
