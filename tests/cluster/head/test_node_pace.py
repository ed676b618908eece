"""An idle remote node is asked for fewer heartbeats, a busy one back to one a second at
once, and the head's patience with a silent node (suspect, lost) scales with what it asked:
the pace on a real registry, the loss on a real head on its socket, the agent's side of it."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
import zmq

from raynb.cluster.head import node_pace
from raynb.cluster.head.node_events import NodeEvents
from raynb.cluster.head.node_pace import BUSY_HEARTBEAT_S, IDLE_AFTER_S, NodePace, idle_heartbeat_s
from raynb.cluster.head.registry import NodeInfo, Registry, WorkerInfo
from raynb.cluster.head.server import Head
from raynb.cluster.node.agent import MAX_STATS_INTERVAL_S, STATS_INTERVAL_S, STATS_REPLY_S, NodeAgent
from raynb.cluster.protocol import messages


def _registry(*node_ids: str) -> Registry:
    r = Registry()
    for n in node_ids:
        r.add_node(NodeInfo(n, f"node:{n}".encode(), "h", "127.0.0.1", 1, 1, 1))
        r.add_worker(WorkerInfo(f"{n}-w1", f"worker:{n}-w1".encode(), n, 2, "h", "127.0.0.1"))
    return r


def test_an_idle_node_is_asked_for_fewer_heartbeats_and_a_busy_one_for_one_a_second_at_once(monkeypatch):
    monkeypatch.setenv("RAYNB_IDLE_HEARTBEAT_S", "3")
    sent = []
    r = _registry("a", "local")
    pace = NodePace(r, lambda ident, t, c: sent.append((ident, t, c)))
    a, t0 = r.nodes["a"], r.nodes["a"].idle_at
    pace.check(a, t0 + IDLE_AFTER_S - 0.1)
    assert sent == [] and a.beat_s == BUSY_HEARTBEAT_S  # not idle long enough yet
    for node in r.nodes.values():
        pace.check(node, t0 + IDLE_AFTER_S + 1)
    assert [(i, t, c["stats_every"]) for i, t, c in sent] == [(b"node:a", messages.PONG, 3.0)]
    assert sent[0][2]["registered"] is True and a.beat_s == 3.0  # the local node is never asked
    pace.check(a, t0 + IDLE_AFTER_S + 2)
    assert len(sent) == 1  # asked once
    r.take_changes()
    r.workers["a-w1"].run_id = "run"  # a task placed there
    pace.busy_changed(r.take_changes()[1], t0 + 20)
    assert [c["stats_every"] for _, _, c in sent[1:]] == [BUSY_HEARTBEAT_S] and a.beat_s == 1.0
    assert a.idle_at is None
    pace.check(a, t0 + 100)
    assert len(sent) == 2  # never slowed while busy
    r.workers["a-w1"].run_id = None
    pace.busy_changed(r.take_changes()[1], t0 + 30)
    assert a.idle_at == t0 + 30 and len(sent) == 2  # idle again: its idle time starts
    pace.check(a, t0 + 30 + IDLE_AFTER_S - 0.1)
    assert len(sent) == 2
    pace.check(a, t0 + 30 + IDLE_AFTER_S)
    assert [c["stats_every"] for _, _, c in sent[2:]] == [3.0]


def test_the_idle_interval_setting_is_bounded(monkeypatch):
    for raw, want in (("0.2", 1.0), ("99", 10.0), ("4.5", 4.5), ("x", 2.0)):
        monkeypatch.setenv("RAYNB_IDLE_HEARTBEAT_S", raw)
        assert idle_heartbeat_s() == want, raw


def test_suspicion_scales_with_the_nodes_interval():
    node = NodeInfo("a", b"node:a", "h", "127.0.0.1", 1, 1, 1)
    node.last_seen = time.monotonic() - 2.0
    assert NodeEvents.node_suspect(node)
    node.beat_s = 3.0
    assert not NodeEvents.node_suspect(node)  # under 1.5 of its 3 s heartbeats
    node.last_seen = time.monotonic() - 5.0
    assert NodeEvents.node_suspect(node)


def _register(sock, session, name: str) -> None:
    session.send(
        sock,
        messages.NODE_REGISTER,
        {
            "node_id": name,
            "hostname": "h" + name,
            "ip": "127.0.0.1",
            "pid": 1,
            "num_workers": 0,
            "max_workers": 0,
            "gpus": [],
            "cpus": 1,
        },
    )


def test_a_real_head_asks_an_idle_node_to_slow_down_and_holds_it_lost_after_as_many_missed_beats(
    raynb_home, monkeypatch
):
    monkeypatch.setattr(node_pace, "IDLE_AFTER_S", 0.3)
    monkeypatch.setenv("RAYNB_IDLE_HEARTBEAT_S", "3")
    monkeypatch.setenv("RAYNB_NODE_TIMEOUT_S", "1")
    key = messages.new_key()
    head = Head(key)
    serving = threading.Thread(target=head.serve, daemon=True)
    serving.start()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    messages.configure_socket(sock)
    sock.setsockopt(zmq.IDENTITY, messages.routing_id("node", "quiet"))
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(head.address)
    session = messages.Session(key)
    try:
        registered = time.monotonic()
        _register(sock, session, "quiet")
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and sock.poll(max(0, deadline - time.monotonic()) * 1000):
            msg = session.recv(sock)
            if msg is not None:
                got.append(msg.content)
        assert [c.get("stats_every") for c in got] == [None, 3.0], got
        # Silent since its registration: lost after 1 s x 3 (its interval), not after 1 s.
        time.sleep(max(0.0, registered + 2.0 - time.monotonic()))
        assert "quiet" in head.registry.nodes
        deadline = time.monotonic() + 10
        while "quiet" in head.registry.nodes and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "quiet" not in head.registry.nodes
        assert time.monotonic() - registered >= 2.9
    finally:
        head._stop = True
        serving.join(timeout=10)
        head.close()
        sock.close(0)
        ctx.term()


def _agent(every: float = STATS_INTERVAL_S):
    return SimpleNamespace(head_forgot=False, stats_every=every, stats_now=False)


@pytest.mark.parametrize(
    "asked, every, now",
    [(3, 3.0, False), (0.1, STATS_INTERVAL_S, False), (1e9, MAX_STATS_INTERVAL_S, False), ("2", 1.0, False)],
)
def test_an_agent_takes_the_heads_pace_within_bounds(asked, every, now):
    agent = _agent()
    NodeAgent.on_pong(agent, SimpleNamespace(content={"registered": True, "stats_every": asked}))
    assert (agent.stats_every, agent.stats_now, agent.head_forgot) == (every, now, False)


def test_an_agent_asked_back_to_one_a_second_sends_one_at_once_and_asks_for_pongs_less_while_idle():
    agent = _agent(3.0)
    NodeAgent.on_pong(agent, SimpleNamespace(content={"stats_every": 1.0}))
    assert agent.stats_every == 1.0 and agent.stats_now
    idle = SimpleNamespace(head_watch=SimpleNamespace(last_heard=100.0, grace_s=60.0), stats_every=3.0)
    assert not NodeAgent._reply_wanted(idle, 100.0 + STATS_REPLY_S)  # 3 heartbeats' worth wait
    assert NodeAgent._reply_wanted(idle, 100.0 + 3 * STATS_REPLY_S)
