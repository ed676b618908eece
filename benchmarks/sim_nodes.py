"""Simulated node agents: a load generator that speaks raynb's real, signed protocol to a
head from one process, for ``scale_nodes.py`` and the tests.

Each simulated node has its own DEALER socket and routing id (``node:<name>:<random>``, as
a real agent's) and sends what a real agent sends (``raynb/cluster/node/agent.py``): a
``node_register`` (by default no workers, ``max_workers`` 0: it hosts no ranks, so the
scheduler never places one there; with ``workers_per_node``, as many, which ``SimWorkers``
brings up), then a ``node_stats`` heartbeat every ``interval_s`` (its resource
report: load average, zygote, workers' samples). As a real agent, a heartbeat asks for
the head's ``pong`` (``"reply": True``) only when the node has not heard from the head for
``reply_every_s`` (the agent's ``STATS_REPLY_S``, scaled as the agent scales it by the
interval the head asked for). As a real agent, a node follows the head's ``stats_every``
(``head/node_pace.py``: fewer heartbeats from an idle node; a faster ask answered with one
at once), unless ``follow_pace`` is False. Every reply is verified with the
cluster's key (``protocol.Session``). The time from an asking heartbeat sent to the head's
``pong`` received is the heartbeat-to-handled latency.

``SimNodes.flood(i, seconds)`` makes node ``i`` send heartbeats back to back, and
``register_twice(i)`` makes it register again on the same socket: the misbehaving
peers that must not harm the others.
"""

from __future__ import annotations

import heapq
import os
import random
import socket
import threading
import time

import zmq

from raynb.cluster.protocol import messages


class SimNodes:
    """Args:
    address (str): the head's ``tcp://HOST:PORT``.
    key (bytes): the cluster's HMAC key.
    interval_s (float): seconds between one node's heartbeats (a real agent's: 1).
    workers_per_node (int): the warm and the most workers each node registers (``SimWorkers``
        brings them up; 0: none, the node hosts no ranks).
    reply_every_s (float): a heartbeat asks for a pong when the node heard nothing from
        the head for this long (a real agent's: ``agent.STATS_REPLY_S``; 0: every one asks).
    follow_pace (bool): take the head's ``stats_every`` as a real agent does (False: one
        heartbeat every ``interval_s`` whatever the head asks, as an agent before it).
    """

    def __init__(
        self,
        address: str,
        key: bytes,
        interval_s: float = 1.0,
        reply_every_s: float | None = None,
        workers_per_node: int = 0,
        follow_pace: bool = True,
    ):
        from raynb.cluster.node import agent

        self.workers_per_node = workers_per_node

        self.address, self.key, self.interval_s = address, key, interval_s
        self.reply_every_s = getattr(agent, "STATS_REPLY_S", 0.0) if reply_every_s is None else reply_every_s
        self._heard: dict[int, float] = {}  # node -> when it last heard from the head (monotonic s)
        self.follow_pace = follow_pace
        self._every: dict[int, float] = {}  # node -> its heartbeat interval, as the head asked (s)
        self._next: dict[int, float] = {}  # node -> when its next heartbeat is due (its heap entry)
        self.paced = 0  # the head's stats_every asks received
        self.ctx = zmq.Context()
        self.ctx.set(zmq.MAX_SOCKETS, 8192)
        self.sessions: list[
            messages.Session
        ] = []  # one each, as a real agent's: the replay check is per sender
        self.socks: list[zmq.Socket] = []
        self.names: list[str] = []
        self.registered: set[int] = set()
        self._pending: set[int] = set()  # registered, not yet acknowledged
        self.rtts: list[float] = []  # heartbeat -> pong (s), since the last take_rtts()
        self.sent = 0  # regular heartbeats sent
        self.flooded = 0  # heartbeats sent by a flooding node
        self._due: list[tuple[float, int]] = []
        self._sent_at: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._flood: tuple[int, float] | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True, name="sim-nodes")
        self._thread.start()

    # -- growing ----------------------------------------------------------------
    def grow(self, count: int, timeout: float = 60.0) -> float:
        """Register ``count`` more nodes; returns the seconds until the head acknowledged all.

        Raises:
            TimeoutError: not all were acknowledged within ``timeout`` s.
        """
        t0 = time.monotonic()
        with self._lock:
            for _ in range(count):
                i = len(self.socks)
                sock = self.ctx.socket(zmq.DEALER)
                messages.configure_socket(sock)
                name = f"sim-{os.getpid()}-{i}"
                sock.setsockopt(zmq.IDENTITY, messages.routing_id("node", name))
                sock.setsockopt(zmq.LINGER, 0)
                sock.connect(self.address)
                self.socks.append(sock)
                self.names.append(name)
                self.sessions.append(messages.Session(self.key, history_size=64))
                self._pending.add(i)
                self._register(i)
        target = len(self.socks)
        while len(self.registered) < target:
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(
                    f"{len(self.registered)} of {target} simulated nodes registered in {timeout:.0f}s"
                )
            time.sleep(0.005)
        return time.monotonic() - t0

    def _register(self, i: int) -> None:
        self.sessions[i].send(
            self.socks[i],
            messages.NODE_REGISTER,
            {
                "node_id": self.names[i],
                "hostname": f"{socket.gethostname()}-{self.names[i]}",
                "ip": "127.0.0.1",
                "pid": os.getpid(),
                "num_workers": self.workers_per_node,
                "max_workers": self.workers_per_node,
                "gpus": [],
                "cpus": 1,
                "shared_storage": True,
                "data_port": None,
                "data_key": None,
                "shm_id": "sim",
            },
        )

    # -- misbehaving --------------------------------------------------------------
    def flood(self, i: int, seconds: float) -> None:
        """Node ``i`` sends heartbeats back to back for ``seconds``."""
        with self._lock:
            self._flood = (i, time.monotonic() + seconds)

    def register_twice(self, i: int) -> None:
        """Node ``i`` registers again on the same socket (a repeat the head must absorb)."""
        with self._lock:
            self._register(i)

    def take_rtts(self) -> list[float]:
        with self._lock:
            out, self.rtts = self.rtts, []
        return out

    # -- the loop -----------------------------------------------------------------
    def _heartbeat(self, i: int, now: float) -> None:
        wait = self.reply_every_s * self._every.get(i, self.interval_s) / self.interval_s
        reply = now - self._heard.get(i, 0.0) >= wait
        self.sessions[i].send(
            self.socks[i],
            messages.NODE_STATS,
            {
                "node_id": self.names[i],
                "workers": {},
                "zygote_pid": None,
                "note": None,
                "load": 0.0,
                "reply": reply,
            },
        )
        if reply:
            self._sent_at.setdefault(i, now)
        self.sent += 1

    def _drain(self, i: int, now: float) -> None:
        sock = self.socks[i]
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            msg = self.sessions[i].accept(frames)
            if msg is None:
                continue
            self._heard[i] = now
            if msg.msg_type != messages.PONG:
                continue
            if i not in self.registered:
                if msg.content.get("registered"):
                    self.registered.add(i)
                    self._pending.discard(i)
                    self._schedule(i, now + random.uniform(0, self.interval_s))
                continue
            every = msg.content.get("stats_every")
            if every is not None and self.follow_pace:
                self._pace(i, float(every), now)
                continue
            sent = self._sent_at.pop(i, None)
            if sent is not None and (self._flood is None or self._flood[0] != i):
                self.rtts.append(time.monotonic() - sent)

    def _schedule(self, i: int, at: float) -> None:
        self._next[i] = at
        heapq.heappush(self._due, (at, i))

    def _pace(self, i: int, every: float, now: float) -> None:
        """The head asked node ``i`` for a heartbeat every ``every`` s (an agent's ``on_pong``)."""
        self.paced += 1
        every = min(10.0, max(self.interval_s, every))
        faster = every < self._every.get(i, self.interval_s)
        self._every[i] = every
        if faster:
            self._schedule(i, now)  # one at once, as an agent does

    def _step(self) -> bool:
        now = time.monotonic()
        busy = False
        while self._due and self._due[0][0] <= now:
            at, i = heapq.heappop(self._due)
            if self._next.get(i) != at:
                continue  # replaced by a sooner one (the head asked for more)
            self._heartbeat(i, time.monotonic())
            self._schedule(i, now + self._every.get(i, self.interval_s))
            busy = True
        if self._flood is not None:
            i, until = self._flood
            if now < until:
                self.flooded += 50
                for _ in range(50):
                    self.sessions[i].send(
                        self.socks[i],
                        messages.NODE_STATS,
                        {
                            "node_id": self.names[i],
                            "workers": {},
                            "zygote_pid": None,
                            "note": None,
                            "load": 0.0,
                        },
                    )
                busy = True
            else:
                self._flood = None
        waiting = set(self._sent_at) | self._pending
        if self._flood is not None:
            waiting.add(self._flood[0])
        for i in waiting:
            self._drain(i, now)
        return busy

    def _loop(self) -> None:
        last_sweep = time.monotonic()
        while not self._stop.is_set():
            with self._lock:
                busy = self._step()
                if time.monotonic() - last_sweep > 2.0:  # replies nobody waits for (free_data)
                    last_sweep = time.monotonic()
                    for i in range(len(self.socks)):
                        self._drain(i, last_sweep)
            if not busy:  # until the next heartbeat is due; soon while replies are awaited
                with self._lock:
                    nap = self._due[0][0] - time.monotonic() if self._due else 0.05
                    if self._sent_at or self._pending or self._flood is not None:
                        nap = min(nap, 0.001)
                time.sleep(min(0.05, max(0.0005, nap)))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for s in self.socks:
            s.close(0)
        self.ctx.term()


class SimWorkers:
    """Simulated workers for simulated nodes: one DEALER socket and signed ``Session`` each,
    as a real worker's (``worker_ready``, then a ``task_done`` for each ``run_task``, at
    once: the function is not run). What it measures: when each run's tasks arrived.

    Args:
        address (str): the head's ``tcp://HOST:PORT``.
        key (bytes): the cluster's HMAC key.
    """

    def __init__(self, address: str, key: bytes):
        import queue

        self.address, self.key = address, key
        self.ctx = zmq.Context()
        self.ctx.set(zmq.MAX_SOCKETS, 16384)
        self.tasks: dict[str, list[float]] = {}  # run id -> monotonic s each run_task arrived
        self._asks: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._socks: dict[zmq.Socket, tuple[str, messages.Session]] = {}
        self._thread = threading.Thread(target=self._loop, daemon=True, name="sim-workers")
        self._thread.start()

    def add(self, node_id: str, count: int) -> list[str]:
        """``count`` workers on simulated node ``node_id`` (registered first); their ids."""
        ids = [f"{node_id}-w{j}" for j in range(count)]
        self._asks.put((node_id, ids))
        return ids

    def arrivals(self, run_id: str) -> list[float]:
        with self._lock:
            return list(self.tasks.get(run_id, ()))

    def _join(self, poller: zmq.Poller, node_id: str, ids: list[str]) -> None:
        for wid in ids:
            sock = self.ctx.socket(zmq.DEALER)
            messages.configure_socket(sock)
            sock.setsockopt(zmq.IDENTITY, messages.routing_id("worker", wid))
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(self.address)
            session = messages.Session(self.key, history_size=64)
            session.send(
                sock,
                messages.WORKER_READY,
                {
                    "worker_id": wid,
                    "pid": os.getpid(),
                    "node_id": node_id,
                    "hostname": node_id,
                    "ip": "127.0.0.1",
                },
            )
            self._socks[sock] = (wid, session)
            poller.register(sock, zmq.POLLIN)

    def _answer(self, sock: zmq.Socket) -> None:
        _, session = self._socks[sock]
        msg = session.recv(sock)
        if msg is None or msg.msg_type != messages.RUN_TASK:
            return  # set_threads, cancel_task: nothing to do for a function that is not run
        c = msg.content
        with self._lock:
            self.tasks.setdefault(c["run_id"], []).append(time.monotonic())
        session.send(sock, messages.TASK_DONE, {"run_id": c["run_id"], "rank": c["rank"], "status": "ok"})

    def _loop(self) -> None:
        poller = zmq.Poller()
        while not self._stop.is_set():
            while not self._asks.empty():
                self._join(poller, *self._asks.get())
            for sock, _ in poller.poll(20) if self._socks else ():
                self._answer(sock)
            if not self._socks:
                time.sleep(0.02)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for s in self._socks:
            s.close(0)
        self.ctx.term()
