"""Holding a placed attempt until its nodes hold the run's shared-memory data.

A run whose payload refers to shared-memory blocks (``spec["shared_data"]``: the data
key, the block ids; ``client.bulk``) cannot start its ranks on a node that lacks a copy.
When the queue has placed such an attempt, :meth:`DataGate.hold` keeps its workers (and
GPUs) reserved and asks the run's client for the blocks the placement's nodes lack
(``data_needed``: node id, agent pid, ip, data socket and its Curve key, ``shm_id``);
the client writes them (its own ``/dev/shm`` or the node's data socket) and answers
``data_ready``, and the ranks get their ``run_task`` then. ``data_failed`` (the client's
error, naming the node), no answer within ``data_wait_s()``, a client no longer
connected, or the run ending meanwhile (a cancel) give the workers back; all but the
last fail the run with the reason.

Which node agent (node id and pid: a restarted agent starts empty) holds which block of
which key is kept here, so trials of one Tune experiment on a node that already has the
key's blocks start without a round trip, and a node that joins later (the replacement a
restarted attempt lands on) is asked for when ranks are placed on it; blocks the client
wrote while pickling (a one-node local cluster: ``shared_data["written"]``) need no ask. ``forget_key``
drops a key when the head tells the nodes to free it (``free_data``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import zmq

from .. import settings
from ..protocol import messages
from .registry import Registry
from .run import Run


def data_wait_s() -> float:
    """How long a placed attempt waits for its client to write the run's data to its
    nodes (``$RAYNB_DATA_WAIT_S``, seconds; default 120)."""
    return max(0.1, settings.get("RAYNB_DATA_WAIT_S"))  # NaN or garbage: the default, not 0.1


@dataclass
class _Waiting:
    run: Run
    placement: object  # scheduler.Placement
    attempt: int
    deadline: float  # monotonic seconds
    nodes: list  # the data_needed entries


def send_if_connected(
    sock: zmq.Socket, session: messages.Session, before: Callable[[bytes], None] = lambda identity: None
) -> Callable:
    """``send(identity, msg_type, content) -> bool`` on the head's ROUTER ``sock``: False,
    and nothing sent, when no peer of that identity is connected (``ROUTER_MANDATORY`` for
    this one send: a client whose process is gone fails its run at once, not after
    ``data_wait_s()``). ``before(identity)`` first: what the head queued for that client
    (its ``run_accepted``) goes before."""

    def send(identity: bytes, msg_type: str, content: dict) -> bool:
        before(identity)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        try:
            session.send(sock, msg_type, content, identity=identity)
            return True
        except zmq.ZMQError:  # EHOSTUNREACH: that client disconnected
            return False
        finally:
            sock.setsockopt(zmq.ROUTER_MANDATORY, 0)

    return send


class DataGate:
    """Args:
    registry: the head's nodes and workers.
    runs: the head's runs by id.
    send: ``send(identity, msg_type, content) -> bool`` (False: that client is gone),
        e.g. :func:`send_if_connected`.
    start: ``start(run, placement)``: send the ranks their ``run_task`` (``RunQueue``).
    requeue: ``requeue(run)``: queue it again at the front (a reserved worker died).
    fail: ``fail(run, message)``: a PENDING run fails with ``message``.
    """

    def __init__(
        self,
        registry: Registry,
        runs: dict,
        send: Callable,
        start: Callable,
        requeue: Callable,
        fail: Callable,
    ):
        self._registry, self._runs, self._send = registry, runs, send
        self._start, self._requeue, self._fail = start, requeue, fail
        self._held: dict[tuple, set] = {}  # (node id, agent pid) -> {(key, block id)}
        self.waiting: dict[str, _Waiting] = {}  # run id -> the attempt held for its data

    def hold(self, run: Run, placement) -> bool:
        """True when ``run``'s placed attempt waits for data (its workers reserved, the
        client asked); False when it needs none or its nodes hold it all: start it now."""
        shared = run.spec.get("shared_data")
        if not shared or not shared.get("blocks"):
            return False
        key, blocks = shared["key"], list(shared["blocks"])
        for n in shared.pop("written", None) or ():  # the client wrote these while pickling
            self._held.setdefault((n["node_id"], n["pid"]), set()).update((key, b) for b in n["blocks"])
        workers = [self._registry.workers[wid] for wid in placement.worker_ids]
        needs = []
        for node_id in dict.fromkeys(w.node_id for w in workers):
            node = self._registry.nodes[node_id]
            have = self._held.get((node_id, node.pid), set())
            lacking = [b for b in blocks if (key, b) not in have]
            if lacking:
                needs.append(
                    {
                        "node_id": node_id,
                        "pid": node.pid,
                        "ip": node.ip,
                        "hostname": node.hostname,
                        "data_port": node.data_port,
                        "data_key": node.data_key,
                        "shm_id": node.shm_id or None,
                        "blocks": lacking,
                    }
                )
        if not needs:
            return False
        names = ", ".join(n["node_id"] for n in needs)
        if not run.client or not self._send(
            run.client,
            messages.DATA_NEEDED,
            {"run_id": run.run_id, "attempt": run.attempt, "key": key, "nodes": needs},
        ):
            self._fail(
                run,
                f"the notebook that submitted the run is gone (its kernel stopped?), so no one "
                f"can write the run's in-memory data to node(s) {names}, where its ranks were "
                "placed; submit the run again from a running notebook",
            )
            return True
        for w in workers:
            w.run_id = run.run_id  # reserved: busy for the scheduler meanwhile
        for w, gpu_id in zip(workers, placement.gpu_ids):
            if gpu_id is not None:
                self._registry.take_gpu(w.node_id, gpu_id)
        self.waiting[run.run_id] = _Waiting(
            run, placement, run.attempt, time.monotonic() + data_wait_s(), needs
        )
        return True

    def _unreserve(self, w: _Waiting) -> None:
        for wid, gpu_id in zip(w.placement.worker_ids, w.placement.gpu_ids):
            worker = self._registry.workers.get(wid)
            if worker is not None and worker.run_id == w.run.run_id:
                worker.run_id = None
            if worker is not None and gpu_id is not None:
                self._registry.give_back_gpu(worker.node_id, gpu_id)

    def _take(self, msg: messages.Message) -> _Waiting | None:
        w = self.waiting.get(msg.content["run_id"])
        if w is None or w.attempt != msg.content["attempt"] or msg.identity != w.run.client:
            return None  # late, for an earlier attempt, or not from the run's client
        del self.waiting[w.run.run_id]
        self._unreserve(w)
        return w

    def on_ready(self, msg: messages.Message) -> None:
        w = self._take(msg)
        if w is None:
            return
        key = w.run.spec["shared_data"]["key"]
        for n in w.nodes:
            self._held.setdefault((n["node_id"], n["pid"]), set()).update((key, b) for b in n["blocks"])
        if w.run.state != "PENDING":
            return
        if all(
            wid in self._registry.workers and not self._registry.workers[wid].busy
            for wid in w.placement.worker_ids
        ):
            self._start(w.run, w.placement)
        else:  # a reserved worker died meanwhile: place it again (its nodes keep the data)
            self._requeue(w.run)

    def on_failed(self, msg: messages.Message) -> None:
        w = self._take(msg)
        if w is not None and w.run.state == "PENDING":
            self._fail(w.run, msg.content["message"])

    def tick(self, now: float) -> None:
        for w in [w for w in self.waiting.values() if now >= w.deadline]:
            del self.waiting[w.run.run_id]
            self._unreserve(w)
            if w.run.state == "PENDING":
                names = ", ".join(n["node_id"] for n in w.nodes)
                self._fail(
                    w.run,
                    (
                        f"the notebook did not write the run's in-memory data to node(s) {names} within "
                        f"{data_wait_s():.0f}s (RAYNB_DATA_WAIT_S) after its ranks were placed: is the "
                        "notebook's kernel still running, and can it reach those nodes' data sockets?"
                    ),
                )

    def drop(self, run: Run) -> None:
        """``run`` ended (a cancel, a failure): give back what its held attempt reserved."""
        w = self.waiting.pop(run.run_id, None)
        if w is not None:
            self._unreserve(w)

    def forget_key(self, key: str) -> None:
        """The nodes were told to free ``key``'s segments (``free_data``)."""
        for held in self._held.values():
            held.difference_update({k for k in held if k[0] == key})
