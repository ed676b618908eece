"""A node agent whose connection to the head closes and that stays silent is lost after a
short grace (raynb/cluster/head/disconnects.py), long before the heartbeat timeout; one that
reconnects at once, or that stays connected however silent, is not: a real head on its own
socket, DEALERs speaking the signed protocol as node agents on another host would."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from raynb.cluster.head.disconnects import DISCONNECT_GRACE_S
from raynb.cluster.head.server import Head
from raynb.cluster.protocol import curve_auth, messages


def _node(ctx, address: str, name: str, keys: dict | None = None) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    messages.configure_socket(sock)
    curve_auth.secure_client(sock, curve_auth.client_part(keys))
    sock.setsockopt(zmq.IDENTITY, messages.routing_id("node", name))
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    return sock


def _register(sock, session, name: str) -> None:
    content = {"node_id": name, "hostname": f"h-{name}", "ip": "127.0.0.1", "pid": 1}
    content.update(num_workers=0, max_workers=0, gpus=[], cpus=1, shm_id="another-machine")
    session.send(sock, messages.NODE_REGISTER, content)
    assert sock.poll(10_000) and session.recv(sock).msg_type == messages.PONG


def _stats(sock, session, name: str) -> None:
    content = {"node_id": name, "workers": {}, "zygote_pid": None, "note": None, "load": 0.0, "reply": False}
    session.send(sock, messages.NODE_STATS, content)


@pytest.mark.parametrize("curve", [False, True], ids=["loopback", "curve"])
def test_a_closed_silent_node_is_lost_after_the_grace_and_a_reconnected_one_is_not(
    raynb_home, monkeypatch, curve
):
    """(With Curve, as a head off loopback: its gatekeeper's monitor also reports closes.)"""
    monkeypatch.setenv("RAYNB_NODE_TIMEOUT_S", "60")  # heartbeats alone: a minute
    key, keys = messages.new_key(), (curve_auth.new_keys() if curve else None)
    head = Head(key, curve_keys=keys)
    assert (head.gatekeeper is not None) == curve
    serving = threading.Thread(target=head.serve, daemon=True)
    serving.start()
    ctx = zmq.Context()
    socks = {name: _node(ctx, head.address, name, keys) for name in ("gone", "blip", "quiet")}
    sessions = {name: messages.Session(key) for name in socks}  # one per agent, as each has its own
    try:
        for name, sock in socks.items():
            _register(sock, sessions[name], name)
            _stats(sock, sessions[name], name)  # (the head learns which connection it talks on)
        time.sleep(0.3)
        closed_at = time.monotonic()
        socks.pop("gone").close(0)  # its host died: the connection closes, nothing more comes
        socks["blip"].disconnect(head.address)  # a blip: its connection closes and comes back
        time.sleep(0.3)
        socks["blip"].connect(head.address)  # (the same socket and routing id, as zmq reconnects)
        deadline = time.monotonic() + DISCONNECT_GRACE_S + 3
        while "gone" in head.registry.nodes and time.monotonic() < deadline:
            _stats(socks["blip"], sessions["blip"], "blip")  # one a second, as an agent's
            time.sleep(0.5)
        took = time.monotonic() - closed_at
        assert "gone" not in head.registry.nodes, f"not lost within {took:.1f} s"
        assert DISCONNECT_GRACE_S <= took < DISCONNECT_GRACE_S + 3
        for _ in range(4):  # two seconds more: the others stay
            _stats(socks["blip"], sessions["blip"], "blip")
            time.sleep(0.5)
        assert {"blip", "quiet"} <= set(head.registry.nodes)  # "quiet" sent nothing since: still there
    finally:
        head._stop = True
        serving.join(timeout=10)
        head.close()
        for sock in socks.values():
            sock.close(0)
        ctx.term()
