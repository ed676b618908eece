"""A worker's link to the head: one DEALER socket, shared by two threads in turn.

A zmq socket is not thread-safe, so exactly one thread owns the link at a time
(``owner``):

- ``MAIN`` between tasks: the main thread waits for the next task on the socket
  itself and sends a task's end itself, so a short task costs no wake-up of
  another thread (on a VM each one costs the waker tens of microseconds);
- ``LENT`` while a task runs, for its first ``HANDOVER_S``: nobody reads the socket;
  what the task sends (a report) waits in the outbox and rides in its ``task_done``
  when the function returns first;
- ``IO`` once the task has run that long: the I/O thread, woken by a timer armed
  without waking it (``wake_timer``), sends what waits and what comes, the
  heartbeats, and acts on the head's messages (a cancel) until the task ends and the
  main thread takes the link back.
"""

from __future__ import annotations

import collections
import logging
import math
import select
import threading
import time
from typing import Callable

import zmq

from ..protocol import curve_auth as curve
from ..protocol import event_batch, messages
from .wake_timer import WakeTimer

log = logging.getLogger("raynb.worker")

# The I/O thread's sign of life to the head: a worker silent much longer than this (a
# SIGSTOP, a hang that holds the GIL) is shown as not responding.
HEARTBEAT_S = 1.0
# An idle worker (its main thread waiting for a task) has nothing to say each second: it
# beats every $RAYNB_IDLE_HEARTBEAT_S, within these bounds (s), as an idle node agent does
# when the head asks; the head waits as many more seconds before it calls one silent.
MAX_IDLE_HEARTBEAT_S = 10.0


def idle_heartbeat_s() -> float:
    """Seconds between an idle worker's heartbeats: ``$RAYNB_IDLE_HEARTBEAT_S`` within
    [``HEARTBEAT_S``, ``MAX_IDLE_HEARTBEAT_S``]."""
    from .. import settings

    return min(MAX_IDLE_HEARTBEAT_S, max(HEARTBEAT_S, settings.get("RAYNB_IDLE_HEARTBEAT_S")))


# A task running this long (s) lends the link to the I/O thread: until then nobody reads
# it, so the first events (a report) wait this long at most, or ride in the task's end
# (one message, no wake-up) when the function returns first; so does a cancel.
HANDOVER_S = 0.02
# How long (s) a ``send(wait=True)`` waits for the I/O thread to have sent its message: past
# it the message still goes, later (a training loop is never held longer than this).
SENT_WAIT_S = 0.5

MAIN, LENT, IO = "main", "lent", "io"


class HeadLink:
    """The socket to the head at ``address`` for worker ``worker_id``, signed with ``key``.

    ``dispatch(msg)`` acts on a message from the head that no waiting call asked for (a
    cancel, ``set_threads``); it runs on whichever thread owns the link. The creating
    thread is the main thread and owns the link first.
    """

    def __init__(
        self, worker_id: str, address: str, key: bytes, dispatch: Callable[[messages.Message], None]
    ):
        self.dispatch = dispatch
        self.ctx = zmq.Context()
        self.session = messages.Session(key, validate=True)
        self.dealer = self.ctx.socket(zmq.DEALER)
        messages.configure_socket(self.dealer)
        self.dealer.setsockopt(zmq.IDENTITY, messages.routing_id("worker", worker_id))
        curve.secure_client(self.dealer, curve.from_env())  # off loopback: CurveZMQ, as every link
        self.dealer.connect(address)
        self._pull = self.ctx.socket(zmq.PULL)  # wake-up frames: what to send is in the outbox
        self._pull.bind("inproc://raynb-out")
        self._push = self.ctx.socket(zmq.PUSH)
        self._push.setsockopt(zmq.SNDHWM, 0)  # report() must never block training
        self._push.setsockopt(zmq.LINGER, 0)
        self._push.connect("inproc://raynb-out")
        self._push_lock = threading.Lock()
        self._poller = zmq.Poller()
        self._poller.register(self.dealer, zmq.POLLIN)
        self._poller.register(self._pull, zmq.POLLIN)
        self._outbox: collections.deque = collections.deque()  # (msg_type, content, buffers) to send
        self._woken = False  # a wake-up frame for the link's owner is on its way
        self._append_lock = threading.Lock()  # an outbox entry and its number, in one order
        self._queued = 0  # messages ever put in the outbox
        self._sent = 0  # ... and ever taken out of it and handed to the socket
        self._sent_cond = threading.Condition()
        self._waiters = 0  # threads waiting in send(wait=True)
        self.head_batches = False  # the head reads a task_done's events (event_batch.reads_batches)
        self._main_ident = threading.get_ident()
        self.owner = MAIN
        self._owner_lock = threading.Lock()
        self._want_back = False  # the main thread asked the I/O thread for the link
        self._given_back = threading.Event()
        self._lent_at = 0.0
        self._handover = WakeTimer()
        self._next_beat = time.monotonic() + HEARTBEAT_S

    def start_io_thread(self) -> None:
        threading.Thread(target=self._io_loop, name="raynb-io", daemon=True).start()

    # -- sending (any thread) -------------------------------------------------
    def send(self, msg_type: str, content: dict, buffers=(), wait: bool = False) -> None:
        """Queue a message for the head; the link's owner signs and sends it, in order.

        Costs the calling thread (a training loop's ``report()``) an append and, when the
        I/O thread owns the link and is not already woken, one empty inproc frame: no
        pickling, signing or socket I/O (most of a report's cost).

        ``wait``: once the I/O thread owns the link, return only when it has handed the
        message to the socket (a report the head must have even if this process dies soon
        after, as a rank killed after its epoch's report would otherwise lose it); at most
        ``SENT_WAIT_S``. Earlier in a task (lent), it waits in the outbox as any message:
        a short task's report rides in its end, costing no message of its own.

        Raises:
            ValueError: the buffers are over ``RAYNB_MAX_MESSAGE_BYTES``; the head would
                drop such a message (a task_done among them: its run would hang).
        """
        size, limit = sum(len(b) for b in buffers), self.session.max_bytes
        if size > limit:
            raise ValueError(
                f"raynb cannot send a {msg_type} message of {size / 2**20:.0f} MiB: over the "
                f"{limit / 2**20:.0f} MiB limit (RAYNB_MAX_MESSAGE_BYTES)"
            )
        with self._append_lock:
            self._outbox.append((msg_type, content, buffers))
            self._queued += 1
            number = self._queued
        # Lent: the I/O thread sends it when it takes the link, or the main thread with the
        # task's end. Owned by the main thread: sent now, when the main thread sends it.
        owner = self.owner
        if owner == LENT or (owner == MAIN and threading.get_ident() == self._main_ident):
            if owner == MAIN:
                self.send_queued()
            return
        self._wake()
        if wait and owner == IO:
            self._wait_sent(number)

    def _wait_sent(self, number: int) -> None:
        """Wait until the ``number``-th queued message is on the socket (``SENT_WAIT_S`` at most)."""
        with self._sent_cond:
            self._waiters += 1
            try:
                self._sent_cond.wait_for(lambda: self._sent >= number, SENT_WAIT_S)
            finally:
                self._waiters -= 1

    def _count_sent(self, taken: int) -> None:
        self._sent += taken
        if self._waiters:
            with self._sent_cond:
                self._sent_cond.notify_all()

    def _wake(self, again: bool = False) -> None:
        """Send the owner a wake-up frame, unless one is on its way (``again``: anyway)."""
        if again or not self._woken:
            self._woken = True
            with self._push_lock:  # a zmq socket is not thread-safe: any thread may send
                self._push.send(b"", copy=True)

    def send_queued(self, session: messages.Session | None = None, dealer=None) -> None:
        """(The link's owner) Sign and send what :meth:`send` queued, oldest first, on the
        link's socket (or ``dealer``, signed by ``session``: a test's). Events of
        one task queued back to back (a burst of reports) go as one ``task_events`` message:
        signed, sent and verified once; those just before the task's ``task_done`` ride in
        it, to a head that reads them (a short function's report and end: one message)."""
        self._woken = False  # before draining: a message queued from now on wakes us again
        session, dealer = session or self.session, dealer or self.dealer
        outbox = self._outbox

        def same_task(item, key) -> bool:
            return (item[1]["run_id"], item[1]["rank"]) == key

        while outbox:
            msg_type, content, buffers = outbox.popleft()
            taken = 1
            if msg_type == messages.TASK_EVENT:
                events, key = [content["event"]], (content["run_id"], content["rank"])
                size = event_batch.event_bytes(content["event"])
                while (
                    outbox
                    and outbox[0][0] == messages.TASK_EVENT
                    and len(events) < event_batch.MAX_BATCH_EVENTS
                    and same_task(outbox[0], key)
                    and size < event_batch.MAX_BATCH_BYTES
                ):
                    events.append(outbox.popleft()[1]["event"])
                    size += event_batch.event_bytes(events[-1])
                    taken += 1
                if (
                    self.head_batches
                    and outbox
                    and outbox[0][0] == messages.TASK_DONE
                    and same_task(outbox[0], key)
                    and size + sum(len(b) for b in outbox[0][2]) < session.max_bytes // 2
                ):
                    msg_type, content, buffers = outbox.popleft()
                    content = {**content, "events": events}
                    taken += 1
                elif len(events) > 1:
                    msg_type, content = (
                        messages.TASK_EVENTS,
                        {"run_id": key[0], "rank": key[1], "events": events},
                    )
            for frames in session.messages(msg_type, content, buffers):
                messages.send_frames(dealer, frames)
            self._count_sent(taken)

    # -- owning the link --------------------------------------------------------
    def serve(
        self, until: Callable[[messages.Message | None], bool], beat_s: float = HEARTBEAT_S
    ) -> messages.Message | None:
        """Poll the link as its owner: send the heartbeats (every ``beat_s`` seconds) and
        what is queued, act on the head's messages (``dispatch``); return when ``until(msg)``
        (msg: the message just read, or None after sending) says so, with that message."""
        self._next_beat = min(self._next_beat, time.monotonic() + beat_s)
        while True:
            now = time.monotonic()
            if now >= self._next_beat:
                self.session.send(self.dealer, messages.WORKER_ALIVE, {})
                self._next_beat = now + beat_s
            # Whole ms, rounded up: pyzmq truncates, and a 0 ms poll would spin until the beat.
            for sock, _ in self._poller.poll(math.ceil(max(0.0, self._next_beat - time.monotonic()) * 1000)):
                if sock is self._pull:
                    while self._pull.poll(0):
                        self._pull.recv(copy=False)
                    self.send_queued()
                    if until(None):
                        return None
                    continue
                msg = self.session.recv(self.dealer)
                if msg is None:
                    continue
                if until(msg):
                    return msg
                self.dispatch(msg)
                msg = None  # a task's message is the main thread's to free once it ran

    def lend(self) -> None:
        """(main thread) A task starts: the I/O thread takes the link in ``HANDOVER_S``."""
        with self._owner_lock:
            self.owner = LENT
            self._lent_at = time.monotonic()
        self._handover.arm(HANDOVER_S)

    def take_back(self) -> None:
        """(main thread) The task ended: own the link again, from the timer if it has not
        fired, else from the I/O thread once it has sent what was queued. What is still
        queued is sent by the next :meth:`send` or :meth:`send_queued`."""
        with self._owner_lock:
            owner = self.owner
            if owner == LENT:
                self.owner = MAIN
            elif owner == IO:
                self._want_back = True
                self._given_back.clear()
        if owner == LENT:
            self._handover.disarm()
        elif owner == IO:
            self._wake(again=True)
            self._given_back.wait()

    def _io_loop(self) -> None:
        timer = select.poll()
        timer.register(self._handover.fileno(), select.POLLIN)
        while True:
            timer.poll()
            if not self._handover.clear():
                continue  # disarmed after it fired: the task ended first
            with self._owner_lock:
                # Not a firing of the last lend, seen only now (the task ended, another began).
                if self.owner != LENT or time.monotonic() - self._lent_at < HANDOVER_S / 2:
                    continue
                self.owner = IO
            try:
                self.send_queued()  # what the task queued so far
                self.serve(lambda msg: msg is None and self._want_back)
            except Exception:  # noqa: BLE001 - the main thread must get the link back all the same
                log.exception("the worker's I/O thread failed; the link goes back to the main thread")
            finally:
                with self._owner_lock:
                    self._want_back = False
                    self.owner = MAIN
                self._given_back.set()
