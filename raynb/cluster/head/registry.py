"""The head's registry: the nodes of the cluster, their workers, and the process
groups those workers formed.

Mutated only by the head's thread (messages from node agents and workers, and the
scheduler's placements); ``snapshot()`` gives the scheduler an immutable view.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from .scheduler import NodeView, Snapshot, WorkerView


@dataclass
class WorkerInfo:
    worker_id: str
    identity: bytes
    node_id: str
    pid: int
    hostname: str
    ip: str
    run_id: str | None = None
    rank: int | None = None
    group_key: str | None = None
    stats: dict = field(default_factory=dict)
    store_port: int | None = None  # its always-listening TCPStore server (rendezvous as rank 0)
    last_seen: float = field(default_factory=time.monotonic)  # its last message (any kind)
    idle_since: float | None = None  # when it last became idle (monotonic), None while busy
    not_responding: str | None = None  # why it is shown as not responding, or None
    threads: int | None = None  # the torch threads its task was given (None: idle, or unknown)
    # The CPUs its run asked per worker (ScalingConfig(resources_per_worker={"CPU": N}),
    # tune.with_resources): its threads, fixed, and what it takes of its node's share.
    cpus: int | None = None
    attempt: int = 0  # of the run whose rank it holds
    kind: str = "torch"  # what its zygote imported (node/kind_zygote.py): only its kind's runs go here

    @property
    def busy(self) -> bool:
        return self.run_id is not None


class _BusyWatch:
    """``WorkerInfo.run_id``: a worker that becomes busy or idle is told to its registry
    (``Registry.take_changes``), whoever set it, so the pool's tick looks at those that
    changed, not at every worker."""

    def __get__(self, w, owner=None):
        return self if w is None else w.__dict__.get("_run_id")

    def __set__(self, w, value) -> None:
        d = w.__dict__
        was = d.get("_run_id")
        d["_run_id"] = value
        if (was is None) != (value is None):
            if value is not None:
                d["idle_since"] = None
            hook = d.get("_on_busy")
            if hook is not None:
                hook(w)


WorkerInfo.run_id = _BusyWatch()


@dataclass
class NodeInfo:
    node_id: str
    identity: bytes
    hostname: str
    ip: str
    pid: int
    num_workers: int
    max_workers: int
    spawning: int = 0  # forks asked for, not yet ready
    spawning_kinds: dict = field(default_factory=dict)  # of those, per kind other than torch
    gpus: list = field(default_factory=list)  # CUDA device indices on this node
    gpus_in_use: set = field(default_factory=set)
    last_seen: float = field(default_factory=time.monotonic)
    cpus: int = 0  # cores its workers may use (0: not reported)
    zygote_pid: int | None = None
    note: str | None = None  # the node agent's last word on its zygote
    load: float | None = None  # its 1-minute load average (node_stats)
    shared_storage: bool = True  # mounts the head's storage_path (else checkpoints are streamed)
    data_port: int | None = None  # its data socket (cluster.data_server), on its ip
    data_key: str | None = None  # that socket's Curve public key (None on loopback)
    shm_id: str = ""  # which /dev/shm it sees (cluster.shm.shm_id)
    labels: dict = field(default_factory=dict)  # e.g. {"ray_node_id": ...}, for `raynb status`
    hosted: bool = False  # a worker joined from it since it registered (its /dev/shm may hold data)
    stats_at: float = -1e9  # when its last node_stats was taken (monotonic s)
    # The heartbeat interval the head last asked of it (s; node_pace.py), and since when none
    # of its workers ran a task (monotonic s; None while one does).
    beat_s: float = 1.0
    idle_at: float | None = field(default_factory=time.monotonic)

    @property
    def free_gpus(self) -> list:
        return [g for g in self.gpus if g not in self.gpus_in_use]


class Registry:
    """Nodes by id, workers by id, and process groups by their members.

    Args:
        max_workers: what the cluster may hold while no node has registered yet
            (the local node's ``--max-workers``), for the submit-time check.
    """

    def __init__(self, max_workers: int | None = None):
        self.nodes: dict[str, NodeInfo] = {}
        self.workers: dict[str, WorkerInfo] = {}
        # worker ids in rank order -> (backend, key, timeout_s) of the process group they form
        self.groups: dict[tuple, tuple] = {}
        self.max_workers = max_workers
        # Indexes kept by add_/remove_ below, so that a node's heartbeat and a per-node count
        # cost the same with 1,000 nodes as with one (a scan of every node per message did not).
        self._node_of_identity: dict[bytes, str] = {}
        self._workers_of_node: dict[str, dict[str, WorkerInfo]] = {}
        self._beyond_warm: dict[str, None] = {}  # nodes over their warm count, in order
        # What changed since the pool's last tick (take_changes): workers that joined or became
        # busy or idle, and nodes whose count of busy workers changed (their thread shares).
        self._changed: dict[str, WorkerInfo] = {}
        self._share_nodes: dict[str, None] = {}
        # Bumped by every change of the workers (joined, left, busy or idle) or of the process
        # groups: what can change which workers may be retired (pool.retirable), and the
        # workers' and groups' part of a snapshot.
        self.version = 0
        self._views: tuple | None = None  # (version, worker views, groups) of the last snapshot

    # -- nodes ------------------------------------------------------------------
    def add_node(self, node: NodeInfo) -> None:
        old = self.nodes.get(node.node_id)
        if old is not None:
            self._node_of_identity.pop(old.identity, None)
        self.nodes[node.node_id] = node
        self._node_of_identity[node.identity] = node.node_id
        self._recount(node.node_id)
        self.version += 1

    def remove_node(self, node_id: str) -> list[WorkerInfo]:
        """Forget a node and its workers; returns the workers it had."""
        node = self.nodes.pop(node_id, None)
        if node is not None and self._node_of_identity.get(node.identity) == node_id:
            del self._node_of_identity[node.identity]
        lost = list(self._workers_of_node.pop(node_id, {}).values())
        self._beyond_warm.pop(node_id, None)
        self._share_nodes.pop(node_id, None)
        for w in lost:
            del self.workers[w.worker_id]
            self._changed.pop(w.worker_id, None)
            w._on_busy = None
            self.forget_groups_with(w.worker_id)
        self.version += 1
        return lost

    def seen(self, identity: bytes) -> None:
        """A message came from this node agent: it is alive."""
        node = self.nodes.get(self._node_of_identity.get(identity, ""))
        if node is not None:
            node.last_seen = time.monotonic()

    def node_of(self, identity: bytes) -> NodeInfo | None:
        """The registered node whose agent has this routing id, or None."""
        return self.nodes.get(self._node_of_identity.get(identity, ""))

    def workers_on(self, node_id: str) -> int:
        return len(self._workers_of_node.get(node_id, ()))

    def nodes_beyond_warm(self) -> list[NodeInfo]:
        """The nodes holding more workers than their warm count (forked for a big or a
        concurrent run): the pool's candidates for retiring, found without a walk over all."""
        return [self.nodes[n] for n in self._beyond_warm if n in self.nodes]

    def _recount(self, node_id: str) -> None:
        node = self.nodes.get(node_id)
        if node is not None and self.workers_on(node_id) > node.num_workers:
            self._beyond_warm[node_id] = None
        else:
            self._beyond_warm.pop(node_id, None)

    def _busy_changed(self, w: WorkerInfo) -> None:
        self._changed[w.worker_id] = w
        self._share_nodes[w.node_id] = None
        self.version += 1

    def take_changes(self) -> tuple[list[WorkerInfo], list[str]]:
        """What changed since the last call: (the workers that joined, or became busy or
        idle; the nodes whose count of busy workers changed), each once."""
        workers, nodes = list(self._changed.values()), list(self._share_nodes)
        self._changed.clear()
        self._share_nodes.clear()
        return workers, nodes

    def workers_of(self, node_id: str) -> list[WorkerInfo]:
        """The workers of ``node_id``, in the order they joined."""
        return list(self._workers_of_node.get(node_id, {}).values())

    def thread_share(self, node_id: str) -> int | None:
        """torch threads for a rank that starts on ``node_id`` now: its cores over its busy
        workers (this run's ranks already counted busy), at least 1; None if unknown."""
        node = self.nodes.get(node_id)
        if node is None or not node.cpus:
            return None
        busy = [w for w in self.workers_of(node_id) if w.busy]
        reserved = sum(w.cpus for w in busy if w.cpus)  # ranks that asked for their CPUs
        shared = sum(1 for w in busy if not w.cpus)
        return max(1, (node.cpus - reserved) // max(1, shared))

    def capacity(self) -> int:
        """The most workers the cluster can hold (1 before any node registered)."""
        return sum(n.max_workers for n in self.nodes.values()) or (self.max_workers or 0) or 1

    def total_gpus(self) -> int:
        return sum(len(n.gpus) for n in self.nodes.values())

    # -- workers ----------------------------------------------------------------
    def add_worker(self, w: WorkerInfo) -> None:
        old = self.workers.get(w.worker_id)
        if old is not None:
            self._workers_of_node.get(old.node_id, {}).pop(w.worker_id, None)
        self.workers[w.worker_id] = w
        self._workers_of_node.setdefault(w.node_id, {})[w.worker_id] = w
        self._recount(w.node_id)
        w._on_busy = self._busy_changed
        self._busy_changed(w)  # the pool notes when it became idle
        node = self.nodes.get(w.node_id)
        if node is not None:
            node.hosted = True
        if node is not None and node.spawning > 0:
            node.spawning -= 1
        if node is not None and node.spawning_kinds.get(w.kind, 0) > 0:
            node.spawning_kinds[w.kind] -= 1

    def remove_worker(self, worker_id: str) -> WorkerInfo | None:
        self.forget_groups_with(worker_id)
        w = self.workers.pop(worker_id, None)
        if w is not None:
            mine = self._workers_of_node.get(w.node_id, {})
            mine.pop(worker_id, None)
            if not mine:
                self._workers_of_node.pop(w.node_id, None)
            self._recount(w.node_id)
            self._changed.pop(worker_id, None)
            w._on_busy = None
            if w.busy:  # its node's other ranks get a bigger share
                self._share_nodes[w.node_id] = None
            self.version += 1
        return w

    def set_kind(self, w: WorkerInfo, kind: str) -> None:
        """``w`` is of ``kind`` from now on (its task imported that framework)."""
        if w.kind != kind:
            w.kind = kind
            self.version += 1  # the next snapshot shows it

    def worker_seen(self, worker_id: str, identity: bytes, now: float) -> None:
        """A message came from this worker (``identity``, its routing id): it is alive."""
        w = self.workers.get(worker_id)
        if w is not None and w.identity == identity:
            w.last_seen = now

    def asked(self, node: NodeInfo, count: int, kind: str = "torch") -> dict:
        """``count`` forks of ``kind`` asked of ``node``: counted in flight until ready.
        Returns the ``spawn_workers`` content for its agent."""
        node.spawning += count
        if kind == "torch":
            return {"count": count}
        node.spawning_kinds[kind] = node.spawning_kinds.get(kind, 0) + count
        return {"count": count, "kind": kind}

    def missing_workers(self, node_id: str | None) -> int:
        """How many workers ``node_id`` lacks of its warm count (forks in flight count)."""
        node = self.nodes.get(node_id) if node_id else None
        if node is None:
            return 0
        return max(0, node.num_workers - self.workers_on(node_id) - node.spawning)

    # -- GPUs -------------------------------------------------------------------
    def take_gpu(self, node_id: str, gpu_id: int) -> None:
        self.nodes[node_id].gpus_in_use.add(gpu_id)

    def give_back_gpu(self, node_id: str, gpu_id: int) -> None:
        if node_id in self.nodes:
            self.nodes[node_id].gpus_in_use.discard(gpu_id)

    # -- process groups ---------------------------------------------------------
    def forget_groups_with(self, worker_id: str) -> None:
        for members in [m for m in self.groups if worker_id in m]:
            del self.groups[members]
            self.version += 1

    def group_key(self, members: tuple, backend: str, timeout_s: float | None) -> str:
        """The key of the process group ``members`` (worker ids in rank order) form:
        the one they already have if it matches, else a new one (a new rendezvous)."""
        for other in [m for m in self.groups if m != members and set(m) & set(members)]:
            del self.groups[other]  # these workers now leave that group
            self.version += 1
        known = self.groups.get(members)
        # The collective timeout is fixed when a group forms: another one needs a new group.
        if known is None or known[0] != backend or known[2] != timeout_s:
            known = self.groups[members] = (backend, uuid.uuid4().hex, timeout_s)
            self.version += 1
        return known[1]

    # -- views ------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """An immutable view for the scheduler. The workers' and groups' views change only
        with ``version``: kept from one snapshot to the next until it moves (a submit and
        its placement take two)."""
        if self._views is None or self._views[0] != self.version:
            workers = tuple(WorkerView(w.worker_id, w.node_id, w.busy, w.kind) for w in self.workers.values())
            self._views = (self.version, workers, tuple(self.groups), sum(w.kind != "torch" for w in workers))
        count = self.workers_on
        return Snapshot(
            nodes=tuple(
                NodeView(
                    n.node_id,
                    n.max_workers,
                    n.spawning,
                    tuple(n.free_gpus) if n.gpus else (),
                    count(n.node_id),
                    len(n.gpus),
                    tuple(n.spawning_kinds.items()),
                )
                for n in self.nodes.values()
            ),
            workers=self._views[1],
            groups=self._views[2],
            other_kinds=self._views[3],
        )

    def status_nodes(self) -> list[dict]:
        return [
            {
                "node_id": n.node_id,
                "hostname": n.hostname,
                "ip": n.ip,
                "pid": n.pid,
                "num_workers": n.num_workers,
                "max_workers": n.max_workers,
                "spawning": n.spawning,
                "gpus": n.gpus,
                "gpus_in_use": sorted(n.gpus_in_use),
                "cpus": n.cpus,
                "zygote_pid": n.zygote_pid,
                "note": n.note,
                "load": n.load,
                "last_heartbeat_s": round(time.monotonic() - n.last_seen, 2),
                "data_port": n.data_port,
                "data_key": n.data_key,
                "shm_id": n.shm_id,
                "workers": self.workers_on(n.node_id),
                "labels": n.labels,
            }
            for n in self.nodes.values()
        ]

    def status_workers(self, run_names: dict[str, str]) -> list[dict]:
        return [
            {
                "worker_id": w.worker_id,
                "node_id": w.node_id,
                "pid": w.pid,
                "state": "busy" if w.busy else "idle",
                "run_id": w.run_id,
                "run": run_names.get(w.run_id),
                "rank": w.rank,
                "kind": w.kind,
                "not_responding": w.not_responding,
                **w.stats,
            }
            for w in self.workers.values()
        ]
