"""A node's heartbeat is answered only when its agent asks (it has not heard from the head
lately), or when the head does not know the node (it must register again): a real head on
its own socket, a DEALER speaking the signed protocol as a node agent."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import zmq

from raynb.cluster.head.server import Head
from raynb.cluster.node.agent import STATS_INTERVAL_S, STATS_REPLY_S, NodeAgent
from raynb.cluster.protocol import messages


def _node(ctx, address: str, name: str) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    messages.configure_socket(sock)
    sock.setsockopt(zmq.IDENTITY, messages.routing_id("node", name))
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    return sock


def _replies(sock, session, wait_s: float) -> list:
    out = []
    while sock.poll(wait_s * 1000):
        msg = session.recv(sock)
        if msg is not None:
            out.append((msg.msg_type, msg.content.get("registered")))
        wait_s = 0.05
    return out


def _stats(name: str, **extra) -> dict:
    return {"node_id": name, "workers": {}, "zygote_pid": None, "note": None, "load": 0.0, **extra}


def test_the_head_answers_a_heartbeat_only_when_asked_or_when_it_does_not_know_the_node(raynb_home):
    key = messages.new_key()
    head = Head(key)
    serving = threading.Thread(target=head.serve, daemon=True)
    serving.start()
    ctx = zmq.Context()
    a, stranger = _node(ctx, head.address, "a"), _node(ctx, head.address, "stranger")
    sa, ss = messages.Session(key), messages.Session(key)
    try:
        sa.send(
            a,
            messages.NODE_REGISTER,
            {
                "node_id": "a",
                "hostname": "ha",
                "ip": "127.0.0.1",
                "pid": 1,
                "num_workers": 0,
                "max_workers": 0,
                "gpus": [],
                "cpus": 1,
            },
        )
        assert _replies(a, sa, 10) == [(messages.PONG, True)]
        sa.send(a, messages.NODE_STATS, _stats("a", reply=False))
        assert _replies(a, sa, 0.5) == []  # heard lately: no pong
        assert head.registry.nodes["a"].stats_at > 0  # but taken
        time.sleep(0.25)  # past the flood limit
        sa.send(a, messages.NODE_STATS, _stats("a", reply=True))
        assert _replies(a, sa, 10) == [(messages.PONG, True)]
        time.sleep(0.25)
        sa.send(a, messages.NODE_STATS, _stats("a"))  # an agent of before 2.3 asks for every one
        assert _replies(a, sa, 10) == [(messages.PONG, True)]
        ss.send(stranger, messages.NODE_STATS, _stats("stranger", reply=False))  # a restarted head's
        assert _replies(stranger, ss, 10) == [(messages.PONG, False)]
    finally:
        head._stop = True
        serving.join(timeout=10)
        head.close()
        a.close(0)
        stranger.close(0)
        ctx.term()


def test_an_agent_asks_for_a_reply_when_it_has_not_heard_from_the_head_lately():
    def agent(last_heard: float, grace_s: float):
        return SimpleNamespace(
            head_watch=SimpleNamespace(last_heard=last_heard, grace_s=grace_s), stats_every=STATS_INTERVAL_S
        )

    ask = NodeAgent._reply_wanted
    assert not ask(agent(100.0, 60.0), 101.0)
    assert not ask(agent(100.0, 60.0), 100.0 + STATS_REPLY_S - 0.1)
    assert ask(agent(100.0, 60.0), 100.0 + STATS_REPLY_S)
    # A short grace on a silent head (RAYNB_HEAD_GRACE_S=2): asked well before it runs out.
    assert ask(agent(100.0, 2.0), 100.5) and not ask(agent(100.0, 2.0), 100.4)
