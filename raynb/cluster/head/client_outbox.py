"""What the head tells a client about its runs, sent once per drain of the socket.

A warm re-run's client used to get eight messages (accepted, three state events,
two progress counters, rank 0's report, run_done), each signed, sent, woken for and
verified: on two cores, a client's wake-ups compete with the ranks it waits for.
Now what is queued for one client while the head handles what arrived (one drain of
its socket) goes out when the drain ends (:meth:`ClientOutbox.flush`): its run events
as one ``run_events`` message, and the events just before a ``run_done`` inside it
(``events``). The client reads them back as the messages they stand for
(``event_batch.expand``), in the order they were queued. A run's tasks, sent during
the drain, so leave before its client's messages: the client is not waiting on them.

The states that follow a ``run_accepted`` in its drain (PENDING, RUNNING) ride in it (2.3):
a re-run's client then gets two messages, the accepted and the ``run_done``.

Any other message to a client (a reply, an error) first sends what waits for it, so
order is kept. A client of an older protocol (under 2.2, no ``run_events``) gets each
message at once, as before.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Callable

from ..protocol import messages
from ..protocol.event_batch import (
    MAX_BATCH_BYTES,
    event_bytes,
    reads_accepted_events,
    reads_batches,
    split_batches,
)

log = logging.getLogger("raynb.head")

# The clients whose protocol version was seen, most recent last (at most this many).
MAX_CLIENTS = 4096
# What a client of each protocol reads (``heard``): run_events and the events of a
# run_done (2.2), the events of a run_accepted too (2.3).
BATCHES, ACCEPTED_EVENTS = 1, 2
# A run_accepted carries the run's first states: a few small events, never a run's output.
MAX_ACCEPTED_EVENTS, MAX_ACCEPTED_EVENT_BYTES = 16, 4096


class ClientOutbox:
    """Args: send(identity, msg_type, content, buffers): sends one message now."""

    def __init__(self, send: Callable):
        self._send = send
        self._queued: dict[bytes, list] = {}
        # identity -> what it reads: 0 each message alone, BATCHES, or ACCEPTED_EVENTS too
        self._batching: OrderedDict[bytes, int] = OrderedDict()

    def heard(self, identity: bytes, version) -> None:
        """A message from client ``identity``, of protocol ``version``."""
        if identity in self._batching:
            self._batching.move_to_end(identity)
            return
        self._batching[identity] = (
            ACCEPTED_EVENTS if reads_accepted_events(version) else BATCHES if reads_batches(version) else 0
        )
        while len(self._batching) > MAX_CLIENTS:
            gone, _ = self._batching.popitem(last=False)
            self.flush(gone)

    def put(self, identity: bytes, msg_type: str, content: dict, buffers=()) -> None:
        """Queue a message for ``identity`` (sent now to a client of an older protocol)."""
        if not self._batching.get(identity):
            return self._send(identity, msg_type, content, buffers)
        self._queued.setdefault(identity, []).append((msg_type, content, buffers))

    def waiting(self, identity: bytes) -> bool:
        return identity in self._queued

    def flush(self, identity: bytes | None = None) -> None:
        """Send what waits for ``identity`` (None: for every client)."""
        for ident in [identity] if identity is not None else list(self._queued):
            items = self._queued.pop(ident, None)
            if items:
                try:
                    self._send_batched(ident, items, self._batching.get(ident, BATCHES) >= ACCEPTED_EVENTS)
                except Exception:  # noqa: BLE001 - one client's message must not stop the head
                    log.exception("could not send %d message(s) to client %r", len(items), ident)

    def _send_batched(self, identity: bytes, items: list, accepted_events: bool) -> None:
        events: list[dict] = []
        accepted = None  # a run_accepted waiting for the events after it
        for msg_type, content, buffers in items:
            if msg_type == messages.RUN_EVENT:
                # Only the accepted run's own first events (its states), while none went past
                # them (the order kept), and small ones: never a burst of another run's output.
                if (
                    accepted is not None
                    and not events
                    and content.get("run_id") == accepted[1]["run_id"]
                    and len(accepted[1]["events"]) < MAX_ACCEPTED_EVENTS
                    and event_bytes(content["event"]) <= MAX_ACCEPTED_EVENT_BYTES
                ):
                    accepted[1]["events"].append(content)
                else:
                    events.append(content)
                continue
            if accepted is not None:
                self._send_accepted(identity, accepted)
                accepted = None
            if msg_type == messages.RUN_DONE and events:
                parts = split_batches(events)
                last = parts.pop()
                if sum(event_bytes(e["event"]) for e in last) > MAX_BATCH_BYTES // 4:
                    parts.append(last)  # a long last burst goes on its own, beside the result frames
                    last = []
                for part in parts:
                    self._send_part(identity, part)
                if last:
                    content = {**content, "events": last}
                events = []
            elif events:
                self._send_events(identity, events)
                events = []
            if msg_type == messages.RUN_ACCEPTED and accepted_events and not buffers:
                accepted = (msg_type, {**content, "events": []}, buffers)  # sent with the states after it
            else:
                self._send(identity, msg_type, content, buffers)
        if accepted is not None:
            self._send_accepted(identity, accepted)
        if events:
            self._send_events(identity, events)

    def _send_accepted(self, identity: bytes, accepted: tuple) -> None:
        msg_type, content, buffers = accepted
        if not content["events"]:
            del content["events"]
        self._send(identity, msg_type, content, buffers)

    def _send_events(self, identity: bytes, events: list[dict]) -> None:
        for part in split_batches(events):
            self._send_part(identity, part)

    def _send_part(self, identity: bytes, part: list[dict]) -> None:
        if len(part) == 1:
            self._send(identity, messages.RUN_EVENT, part[0], ())
        else:
            self._send(identity, messages.RUN_EVENTS, {"events": part}, ())
