"""An idle worker heartbeats every ``RAYNB_IDLE_HEARTBEAT_S`` instead of every second, and
the head waits as many more seconds before it calls an idle worker silent; a worker that
runs a task beats every second again at once, and the head judges it as before."""

from __future__ import annotations

import threading
import time

import zmq

from raynb.cluster.head.pool import WORKER_SILENCE_S, _why_not_responding
from raynb.cluster.head.registry import WorkerInfo
from raynb.cluster.protocol import messages
from raynb.cluster.worker import head_link
from raynb.cluster.worker.head_link import HeadLink

KEY = b"k" * 64


def _beats(link: HeadLink, router: zmq.Socket, head: messages.Session, beat_s: float, seconds: float):
    """Times (s from the start) of the heartbeats the head's ROUTER got while the link
    served with ``beat_s`` for ``seconds``; the head's ``pong`` ends the serve."""
    got: list[float] = []
    t0 = time.monotonic()
    done = threading.Event()

    def head_side():
        identity = None
        while time.monotonic() - t0 < seconds:
            if router.poll(50):
                msg = head.recv(router, router=True)
                if msg is not None and msg.msg_type == messages.WORKER_ALIVE:
                    got.append(time.monotonic() - t0)
                    identity = msg.identity
        head.send(router, messages.PONG, {"time": time.time()}, identity=identity)
        done.set()

    t = threading.Thread(target=head_side)
    t.start()
    link.serve(lambda m: m is not None and m.msg_type == messages.PONG, beat_s=beat_s)
    t.join()
    assert done.is_set()
    return got


def test_an_idle_worker_beats_at_the_idle_pace_and_a_busy_one_every_second_at_once():
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    link = HeadLink("w-idle", f"tcp://127.0.0.1:{port}", KEY, dispatch=lambda m: None)
    head = messages.Session(KEY, validate=True)
    try:
        idle = _beats(link, router, head, 2.0, 4.6)
        # The first at most a second after the link was made, then one every 2 s.
        assert 2 <= len(idle) <= 3, idle
        assert all(b - a > 1.8 for a, b in zip(idle, idle[1:])), idle
        busy = _beats(link, router, head, head_link.HEARTBEAT_S, 3.6)
        # Busy again: within a second of the change, then every second.
        assert len(busy) >= 3 and busy[0] < 1.2, busy
    finally:
        for sock in (link.dealer, link._pull, link._push, router):
            sock.close(0)
        link.ctx.term()
        ctx.term()


def test_idle_heartbeat_interval_follows_the_setting_within_bounds(monkeypatch):
    for value, expected in (("3", 3.0), ("0.2", 1.0), ("60", head_link.MAX_IDLE_HEARTBEAT_S)):
        monkeypatch.setenv("RAYNB_IDLE_HEARTBEAT_S", value)
        assert head_link.idle_heartbeat_s() == expected
    monkeypatch.delenv("RAYNB_IDLE_HEARTBEAT_S")
    assert head_link.idle_heartbeat_s() == 2.0


def test_the_head_waits_longer_for_an_idle_worker_only():
    now = time.monotonic()
    w = WorkerInfo.__new__(WorkerInfo)
    w.last_seen = now - (WORKER_SILENCE_S + 1)
    w.run_id = None
    assert _why_not_responding(w, {}, now, idle_s=2.0) is None
    w.last_seen = now - (2 * WORKER_SILENCE_S + 1)
    assert "no message from it" in _why_not_responding(w, {}, now, idle_s=2.0)
    w.last_seen, w.run_id = now - (WORKER_SILENCE_S + 1), "run-1"  # running a task: as before
    assert "no message from it" in _why_not_responding(w, {}, now, idle_s=2.0)
