"""Events sent as one message and read back as the messages they stand for.

- A rank's burst of events is one ``task_events`` message (signed once), and back.
- A task's last events ride in its ``task_done`` (``worker.py``), sent to a head that
  reads them (:func:`reads_batches`).
- The head's events for one client between two drains of its socket are one
  ``run_events`` message; those just before a run's ``run_done`` ride in it, and those
  just after its ``run_accepted`` (its first states) ride in that (protocol 2.3;
  ``head/client_outbox.py``). :func:`expand` gives a client the messages it stands for.
"""
from __future__ import annotations

from .messages import RUN_ACCEPTED, RUN_DONE, RUN_EVENT, RUN_EVENTS, TASK_DONE, TASK_EVENT, Message

# The most events one batch carries (a rank's report burst), and about the most bytes of
# their text and metrics: far under any message limit (RAYNB_MAX_MESSAGE_BYTES), also
# with a return value or a run's result frames next to them.
MAX_BATCH_EVENTS = 256
MAX_BATCH_BYTES = 1 << 20


def event_bytes(event: dict) -> int:
    """About what ``event`` adds to a message (bytes): its text, and a little per field."""
    text = event.get("text")
    metrics = event.get("metrics")
    return 256 + (len(text) if isinstance(text, str) else 0) + 64 * (len(metrics) if isinstance(metrics, dict) else 0)


def split_batches(events: list) -> list[list]:
    """``events`` (their contents, any kind) in runs of at most ``MAX_BATCH_EVENTS`` and
    about ``MAX_BATCH_BYTES``, in order (each run at least one)."""
    out, part, size = [], [], 0
    for e in events:
        n = event_bytes(e.get("event", e))
        if part and (len(part) >= MAX_BATCH_EVENTS or size + n > MAX_BATCH_BYTES):
            out.append(part)
            part, size = [], 0
        part.append(e)
        size += n
    if part:
        out.append(part)
    return out


def reads_batches(version) -> bool:
    """Whether a peer of protocol ``version`` ("2.2") reads ``run_events`` and the
    ``events`` of a ``run_done`` or ``task_done`` (2.2 and later)."""
    return _at_least(version, (2, 2))


def reads_accepted_events(version) -> bool:
    """Whether a client of protocol ``version`` reads the ``events`` of a ``run_accepted``
    (2.3 and later)."""
    return _at_least(version, (2, 3))


def _at_least(version, least: tuple) -> bool:
    try:
        major, minor = (int(x) for x in str(version).split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= least


def unbatch(msg: Message) -> list[Message]:
    """A ``task_events`` message as the ``task_event`` messages it carries, in order; a
    ``task_done`` as those it carries (``events``), without it."""
    c = msg.content
    events = c.get("events") or () if msg.msg_type == TASK_DONE else c["events"]
    return [Message(TASK_EVENT, {"run_id": c["run_id"], "rank": c["rank"], "event": e}, [], msg.header,
                    msg.identity) for e in events]


def expand(msg: Message) -> list[Message]:
    """A ``run_events`` message as its ``run_event`` messages; a ``run_done`` that carries
    ``events`` as those events, then the ``run_done`` without them; a ``run_accepted``
    that carries ``events`` as itself without them, then those events; any other message
    as itself. In the order the head sent them."""
    if msg.msg_type == RUN_EVENTS:
        events = msg.content["events"]
    elif msg.msg_type in (RUN_DONE, RUN_ACCEPTED) and "events" in msg.content:
        events = msg.content.pop("events")
    else:
        return [msg]
    out = [Message(RUN_EVENT, e, [], msg.header, msg.identity) for e in events]
    if msg.msg_type == RUN_DONE:
        out.append(msg)
    elif msg.msg_type == RUN_ACCEPTED:
        out.insert(0, msg)
    return out
