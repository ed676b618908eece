"""A node whose agent and all its workers fall silent together (its host vanished without
closing its connections: a power cut, a network cut) is lost after half the heartbeat
timeout (raynb/cluster/head/host_silence.py); a node whose agent alone is silent while its
workers go on (a slow agent), whose workers alone are silent, or that has no worker, is
judged by the full timeout. A real head on its own socket; DEALERs speaking the signed
protocol as the node agents and workers on another host would, their connections left
open (no close for the head to see)."""

from __future__ import annotations

import threading
import time

import zmq

from raynb.cluster.head.server import Head
from raynb.cluster.protocol import messages

TIMEOUT_S = 6.0  # RAYNB_NODE_TIMEOUT_S here: together-silent nodes go after 3 s


def _dealer(ctx, address: str, kind: str, name: str) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    messages.configure_socket(sock)
    sock.setsockopt(zmq.IDENTITY, messages.routing_id(kind, name))
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    return sock


class _Host:
    """A node agent ``name`` and ``workers`` workers of it, each with its own connection."""

    def __init__(self, ctx, head: Head, key: bytes, name: str, workers: int):
        self.name = name
        self.agent = _dealer(ctx, head.address, "node", name)
        self.session = messages.Session(key)
        content = {"node_id": name, "hostname": f"h-{name}", "ip": "127.0.0.1", "pid": 1}
        content.update(num_workers=workers, max_workers=workers, gpus=[], cpus=1, shm_id="another-machine")
        self.session.send(self.agent, messages.NODE_REGISTER, content)
        assert self.agent.poll(10_000) and self.session.recv(self.agent).msg_type == messages.PONG
        self.workers = []
        for i in range(workers):
            wid = f"{name}-w{i}"
            sock, session = _dealer(ctx, head.address, "worker", wid), messages.Session(key)
            ready = {"worker_id": wid, "pid": 100 + i, "node_id": name, "hostname": f"h-{name}"}
            session.send(sock, messages.WORKER_READY, dict(ready, ip="127.0.0.1"))
            self.workers.append((sock, session))

    def agent_beat(self) -> None:
        content = {"node_id": self.name, "workers": {}, "zygote_pid": None, "note": None}
        self.session.send(self.agent, messages.NODE_STATS, dict(content, load=0.0, reply=False))

    def workers_beat(self) -> None:
        for sock, session in self.workers:
            session.send(sock, messages.WORKER_ALIVE, {})

    def close(self) -> None:
        for sock in [self.agent] + [s for s, _ in self.workers]:
            sock.close(0)


def test_a_node_silent_with_all_its_workers_is_lost_at_half_the_timeout(raynb_home, monkeypatch):
    monkeypatch.setenv("RAYNB_NODE_TIMEOUT_S", str(TIMEOUT_S))
    # These workers hold no run, so the head would judge them at the idle interval; they beat
    # every second, as a run's ranks do, and are judged so.
    monkeypatch.setenv("RAYNB_IDLE_HEARTBEAT_S", "1")
    key = messages.new_key()
    head = Head(key)
    serving = threading.Thread(target=head.serve, daemon=True)
    serving.start()
    ctx = zmq.Context()
    hosts = {}
    try:
        for name, workers in (("cut", 2), ("slow_agent", 1), ("busy_rank", 1), ("bare", 0)):
            hosts[name] = _Host(ctx, head, key, name, workers)
        deadline = time.monotonic() + 10
        while len(head.registry.workers) < 4:
            assert time.monotonic() < deadline, "the workers did not register"
            time.sleep(0.05)
        for h in hosts.values():
            h.agent_beat()
            h.workers_beat()
        silent_at = time.monotonic()  # from here: "cut" and "bare" send nothing more
        lost_after = None
        while time.monotonic() - silent_at < TIMEOUT_S - 1.0:
            hosts["slow_agent"].workers_beat()  # its agent is stuck; its worker goes on
            hosts["busy_rank"].agent_beat()  # its worker holds the GIL; its agent goes on
            if lost_after is None and "cut" not in head.registry.nodes:
                lost_after = time.monotonic() - silent_at
            time.sleep(0.25)
        assert lost_after is not None, "the node silent with all its workers was not lost"
        assert TIMEOUT_S / 2 <= lost_after < TIMEOUT_S - 1.0, lost_after
        assert {"slow_agent", "busy_rank", "bare"} <= set(head.registry.nodes)
        assert not any(w.node_id == "cut" for w in head.registry.workers.values())
    finally:
        head._stop = True
        serving.join(timeout=10)
        head.close()
        for h in hosts.values():
            h.close()
        ctx.term()


def test_idle_workers_are_judged_at_the_idle_heartbeat_interval(monkeypatch):
    from raynb.cluster.head.host_silence import _worker_beat_s
    from raynb.cluster.head.registry import WorkerInfo

    monkeypatch.setenv("RAYNB_IDLE_HEARTBEAT_S", "3")
    idle = WorkerInfo("w0", b"w0", "n", 1, "h", "127.0.0.1")
    busy = WorkerInfo("w1", b"w1", "n", 2, "h", "127.0.0.1", run_id="r")
    assert _worker_beat_s(idle) == 3.0
    assert _worker_beat_s(busy) == 1.0
