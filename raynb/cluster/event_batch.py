"""Events sent as one message and read back as the messages they stand for.

- A rank's burst of events is one ``task_events`` message (signed once), and back.
- A task's last events ride in its ``task_done`` (``worker.py``), sent to a head that
  reads them (:func:`reads_batches`).
- The head's events for one client between two drains of its socket are one
  ``run_events`` message; those just before a run's ``run_done`` ride in it
  (``head/client_outbox.py``). :func:`expand` gives a client the messages it stands for.
"""
from __future__ import annotations

from .protocol import RUN_DONE, RUN_EVENT, RUN_EVENTS, TASK_DONE, TASK_EVENT, Message

# The most events one task_events message carries (a rank's report burst).
MAX_BATCH_EVENTS = 256


def reads_batches(version) -> bool:
    """Whether a peer of protocol ``version`` ("2.2") reads ``run_events`` and the
    ``events`` of a ``run_done`` or ``task_done`` (2.2 and later)."""
    try:
        major, minor = (int(x) for x in str(version).split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (2, 2)


def unbatch(msg: Message) -> list[Message]:
    """A ``task_events`` message as the ``task_event`` messages it carries, in order; a
    ``task_done`` as those it carries (``events``), without it."""
    c = msg.content
    events = c.get("events") or () if msg.msg_type == TASK_DONE else c["events"]
    return [Message(TASK_EVENT, {"run_id": c["run_id"], "rank": c["rank"], "event": e}, [], msg.header,
                    msg.identity) for e in events]


def expand(msg: Message) -> list[Message]:
    """A ``run_events`` message as its ``run_event`` messages, and a ``run_done`` that
    carries ``events`` as those events, then the ``run_done`` without them; any other
    message as itself. In the order the head sent them."""
    if msg.msg_type == RUN_EVENTS:
        events = msg.content["events"]
    elif msg.msg_type == RUN_DONE and "events" in msg.content:
        events = msg.content.pop("events")
    else:
        return [msg]
    out = [Message(RUN_EVENT, e, [], msg.header, msg.identity) for e in events]
    if msg.msg_type == RUN_DONE:
        out.append(msg)
    return out
