"""Events sent as one message and read back as the messages they stand for.

- A rank's burst of events is one ``task_events`` message (signed once), and back.
- The head's events for one client between two drains of its socket are one
  ``run_events`` message; those just before a run's ``run_done`` ride in it
  (``head/client_outbox.py``). :func:`expand` gives a client the messages it stands for.
"""
from __future__ import annotations

from .protocol import RUN_DONE, RUN_EVENT, RUN_EVENTS, TASK_EVENT, Message

# The most events one task_events message carries (a rank's report burst).
MAX_BATCH_EVENTS = 256


def unbatch(msg: Message) -> list[Message]:
    """A ``task_events`` message as the ``task_event`` messages it carries, in order."""
    c = msg.content
    return [Message(TASK_EVENT, {"run_id": c["run_id"], "rank": c["rank"], "event": e}, [], msg.header,
                    msg.identity) for e in c["events"]]


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
