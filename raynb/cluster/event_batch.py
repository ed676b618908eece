"""A rank's burst of events as one ``task_events`` message (signed once), and back."""
from __future__ import annotations

from .protocol import TASK_EVENT, Message

# The most events one task_events message carries (a rank's report burst).
MAX_BATCH_EVENTS = 256


def unbatch(msg: Message) -> list[Message]:
    """A ``task_events`` message as the ``task_event`` messages it carries, in order."""
    c = msg.content
    return [Message(TASK_EVENT, {"run_id": c["run_id"], "rank": c["rank"], "event": e}, [], msg.header,
                    msg.identity) for e in c["events"]]
