"""The floor raynb's warm loop is measured against: the least a warm re-run can cost.

Forked workers (torch imported once, before the fork), one gloo process group formed
once, and for each run a cloudpickled function sent over ZeroMQ to every worker, which
runs it and answers; no signing, no schema, no run directory, no progress events, no
head in between. ``report(metrics)`` inside the function is one pickled ZeroMQ send.
Used side by side with raynb in ``rerun_latency.py`` and ``report_cost.py``, so the
distance to the floor is one ratio measured under the same load.

``RelayFloor`` is the same with one more process between the driver and the workers,
which forwards every message unread: the shape of raynb's path (client -> head ->
workers -> head -> client) with nothing done in the head, so raynb's distance to the
floor splits into what the head's two extra hops cost and what raynb's own work costs.

Usage (inside a benchmark)::

    with Floor(4) as floor:        # or RelayFloor(4)
        result = floor.run(fn)   # {"seconds", "reports": [...], "returns": [...], "cpu_s"}
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import socket
import time

import cloudpickle
import zmq


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, address: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(address)
    sock.send(pickle.dumps(("ready", rank, None)))

    def report(metrics: dict) -> None:
        sock.send(pickle.dumps(("report", rank, metrics)))

    while True:
        data = sock.recv()
        if data == b"stop":
            break
        fn = cloudpickle.loads(data)
        ret = fn(report)
        sock.send(pickle.dumps(("done", rank, ret)))
    dist.destroy_process_group()
    sock.close(0)
    ctx.term()


def _relay(world: int, driver_port: int, worker_port: int) -> None:
    """Forward the driver's messages to every worker and the workers' to the driver,
    unread (what the head adds to the floor's path, with none of the head's work)."""
    ctx = zmq.Context()
    driver = ctx.socket(zmq.ROUTER)
    driver.bind(f"tcp://127.0.0.1:{driver_port}")
    workers = ctx.socket(zmq.ROUTER)
    workers.bind(f"tcp://127.0.0.1:{worker_port}")
    ids = [workers.recv_multipart()[0] for _ in range(world)]  # each worker's "ready"
    client, _ = driver.recv_multipart()  # the driver's hello
    driver.send_multipart([client, pickle.dumps(("ready", -1, None))])
    poller = zmq.Poller()
    poller.register(driver, zmq.POLLIN)
    poller.register(workers, zmq.POLLIN)
    while True:
        for sock, _ in poller.poll():
            if sock is driver:
                _, data = driver.recv_multipart()
                for ident in ids:
                    workers.send_multipart([ident, data])
                if data == b"stop":  # the stops delivered before this process exits
                    for sock in (driver, workers):
                        sock.close(linger=2000)
                    ctx.term()
                    return
            else:
                _, data = workers.recv_multipart()
                driver.send_multipart([client, data])


class Floor:
    """``world`` forked workers in one gloo group, driven over one ROUTER socket."""

    def __init__(self, world: int = 4):
        self.world = world

    def __enter__(self) -> "Floor":
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self._start_workers(f"tcp://127.0.0.1:{port}")
        self.ids: dict[int, bytes] = {}
        while len(self.ids) < self.world:
            ident, data = self.sock.recv_multipart()
            _, rank, _ = pickle.loads(data)
            self.ids[rank] = ident
        return self

    def _start_workers(self, address: str) -> None:
        import torch  # noqa: F401  (imported before the fork, as raynb's zygote does)
        import torch.distributed  # noqa: F401

        fork = mp.get_context("fork")
        gloo_port = _free_port()
        self.procs = [
            fork.Process(target=_worker, args=(r, self.world, gloo_port, address), daemon=True)
            for r in range(self.world)
        ]
        for p in self.procs:
            p.start()

    def run(self, fn) -> dict:
        """Ship ``fn`` (called as ``fn(report)`` on every rank) and wait for every rank.

        Returns: {"seconds": submit -> every rank done, "reports": rank 0's metrics,
        "returns": each rank's return value, "cpu_s": this process's CPU time in it}."""
        cpu0, t0 = time.process_time(), time.perf_counter()
        data = cloudpickle.dumps(fn, protocol=5)
        self._send_all(data)
        reports, returns, done = [], {}, 0
        while done < self.world:
            raw = self.sock.recv_multipart()[-1]
            kind, rank, value = pickle.loads(raw)
            if kind == "report" and rank == 0:
                reports.append(value)
            elif kind == "done":
                returns[rank] = value
                done += 1
        return {
            "seconds": time.perf_counter() - t0,
            "reports": reports,
            "returns": [returns[r] for r in range(self.world)],
            "cpu_s": time.process_time() - cpu0,
        }

    def _send_all(self, data: bytes) -> None:
        for rank in range(self.world):
            self.sock.send_multipart([self.ids[rank], data])

    def __exit__(self, *exc) -> None:
        try:
            self._send_all(b"stop")
        except (KeyError, zmq.ZMQError):
            pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                os.kill(p.pid, 9)
                p.join()
        self.sock.close(0)
        self.ctx.term()


class RelayFloor(Floor):
    """:class:`Floor` with a relay process (``_relay``) between this driver and the workers."""

    def __enter__(self) -> "RelayFloor":
        driver_port, worker_port = _free_port(), _free_port()
        self._start_workers(f"tcp://127.0.0.1:{worker_port}")
        relay = mp.get_context("fork").Process(
            target=_relay, args=(self.world, driver_port, worker_port), daemon=True
        )
        relay.start()
        self.procs.append(relay)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.connect(f"tcp://127.0.0.1:{driver_port}")
        self.sock.send(b"hello")
        if not self.sock.poll(120_000):  # the relay's "ready": every worker is connected
            self.__exit__()
            raise RuntimeError("the relay floor's workers did not come up within 120 s")
        self.sock.recv()
        return self

    def _send_all(self, data: bytes) -> None:
        self.sock.send(data)  # the relay sends it to every worker
