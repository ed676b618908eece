"""Who follows runs on a connection now: a fit's follow loop
(``submit_and_follow.RunFollower``) or Tune's controller (``tune/controller.py``).

The client's handler table (``handlers.py``) hands a run's messages (``run_event``,
``run_done``, ``run_record``) to the connection's follower, whichever loop is waiting on
it; a follower picks the runs it follows by ``run_id``. With nobody following (a request
waiting for its reply, a cell between runs), they are dropped: a run nobody follows has
its whole record on disk and at the head (``raynb.attach``).
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Protocol

from ..cluster.protocol.messages import Message

# The methods a follower has, one per run message the client's table hands to it.
FOLLOWER_METHODS = ("on_run_event", "on_run_done", "on_run_record")


class Follower(Protocol):
    """What follows runs: each method gets one message of its type, verified."""

    def on_run_event(self, msg: Message) -> None: ...

    def on_run_done(self, msg: Message) -> None: ...

    def on_run_record(self, msg: Message) -> None: ...


class _Nobody:
    """The follower of a connection nobody follows runs on: it drops their messages."""

    def on_run_event(self, msg: Message) -> None:
        pass

    on_run_done = on_run_record = on_run_event


NOBODY = _Nobody()


@contextlib.contextmanager
def following(client, follower: Follower) -> Iterator[None]:
    """Hand ``client``'s run messages to ``follower`` inside the block (the one before it
    gets them again after)."""
    before = getattr(client, "follower", NOBODY)
    client.follower = follower
    try:
        yield
    finally:
        client.follower = before


def on_run_event(client, msg: Message) -> None:
    """One event of a run: to the follower."""
    getattr(client, "follower", NOBODY).on_run_event(msg)


def on_run_done(client, msg: Message) -> None:
    """A run ended: to the follower."""
    getattr(client, "follower", NOBODY).on_run_done(msg)


def on_run_record(client, msg: Message) -> None:
    """A run's record (the answer to ``attach_run``, sent again after a silence): to the
    follower; a ``get_run`` request reads its own reply from ``recv`` as well."""
    getattr(client, "follower", NOBODY).on_run_record(msg)
