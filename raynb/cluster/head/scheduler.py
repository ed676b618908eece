"""Placing a run's ranks: a pure function of a registry snapshot and a request.

The head asks :func:`place` for the run at the front of its queue each time
something changed (a worker became ready or idle, a run ended). The answer is one
of three: a :class:`Placement` (start now on these workers, rank by rank), a
:class:`Fork` (too few idle workers: fork these many more on these nodes, then
wait) or a :class:`Wait` (enough workers, but not enough free GPUs). :func:`check`
answers at submit time whether the cluster can ever hold the run.

Gang placement, as Ray Train's placement groups: a run starts on all its ranks at
once or not at all. Ranks of one node are kept contiguous (so local ranks are
0..k-1 on every node), runs pack onto as few nodes as possible (the local node
first), and a set of idle workers that already form a process group of the right
size is reused, which skips the rendezvous on a warm re-run. Runs are served in
order (FIFO): a second concurrent run waits behind the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

LOCAL_NODE_ID = "local"
STRATEGIES = ("PACK", "SPREAD")


# The views are named tuples, not frozen dataclasses: the head builds one per node and per
# worker for each placement, and a tuple is built several times faster.
class NodeView(NamedTuple):
    node_id: str
    max_workers: int
    spawning: int  # forks asked for, not yet ready
    free_gpus: tuple = ()  # CUDA device indices not held by a run
    num_workers: int = 0  # workers it has now (idle or busy)
    gpus: int = 0  # CUDA devices it has, held or free
    spawning_kinds: tuple = ()  # (kind, forks in flight) for kinds other than torch


def spawning_of(node: NodeView, kind: str) -> int:
    """The forks of ``kind`` in flight on ``node`` (torch's: those of no other kind)."""
    others = dict(node.spawning_kinds)
    if kind == "torch":
        return max(0, node.spawning - sum(others.values()))
    return others.get(kind, 0)


class WorkerView(NamedTuple):
    worker_id: str
    node_id: str
    busy: bool = False
    kind: str = "torch"  # what its zygote imported (node/kind_zygote.py)


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple = ()  # NodeView, in registration order
    workers: tuple = ()  # WorkerView, in registration order
    groups: tuple = ()  # process groups that exist: worker ids in rank order
    other_kinds: int = 0  # workers of a kind other than torch (none: no filtering)


# The worker kinds a node agent can fork (node/kind_zygote.KINDS, which the head may not
# import): a run asking for another would wait for workers no node ever starts.
KINDS = ("torch", "tensorflow")


@dataclass(frozen=True)
class Request:
    num_workers: int
    use_gpu: bool = False  # one GPU per rank
    strategy: str = "PACK"  # "PACK": fewest nodes; "SPREAD": most nodes (Ray's names)
    # Elastic (Ray Train v2's num_workers=(min, max)): num_workers is the max; any count
    # from min_workers up that can be placed will do (see place_elastic).
    min_workers: int | None = None
    now: bool = False  # elastic: start on the idle workers now, forking none first
    kind: str = "torch"  # the workers its ranks need: torch, or tensorflow (TensorflowTrainer)


@dataclass(frozen=True)
class Placement:
    """Start the run: rank r on ``worker_ids[r]``, with CUDA device ``gpu_ids[r]`` (or None)."""

    worker_ids: tuple
    gpu_ids: tuple


@dataclass(frozen=True)
class Fork:
    """Too few idle workers. ``forks``: node id -> workers to fork there now (may be
    empty when enough forks are in flight); ``unplaceable``: how many of the missing
    workers no node has room for (the run waits for others to end)."""

    forks: dict = field(default_factory=dict)
    unplaceable: int = 0
    kind: str = "torch"  # of the workers to fork
    # Idle workers of other kinds to retire first, for room on nodes at their max_workers.
    retire: tuple = ()


@dataclass(frozen=True)
class Wait:
    reason: str


def check(request: Request, snapshot: Snapshot, capacity: int, total_gpus: int) -> str | None:
    """Why the cluster can never hold ``request`` (one line naming the fix), or None.

    Args:
        capacity: the most workers the cluster may hold (``Registry.capacity()``).
        total_gpus: GPUs over all nodes.
    """
    n = request.num_workers
    if request.kind not in KINDS:
        return (
            f"worker_kind={request.kind!r} is not a kind of worker raynb starts ({', '.join(KINDS)}); "
            "use TorchTrainer (torch) or TensorflowTrainer (tensorflow)"
        )
    if request.strategy not in STRATEGIES:
        return (
            f"placement_strategy={request.strategy!r} is not one of {', '.join(STRATEGIES)}; "
            "use PACK (fewest nodes) or SPREAD (most nodes)"
        )
    if n > capacity:
        return (
            f"num_workers={n} is more than this cluster can hold ({capacity} workers "
            f"over {len(snapshot.nodes)} node(s): {_per_node(snapshot, 'max_workers', 'at most')}); "
            f"ask for at most {capacity}, or add a node with `raynb node --address ...`, or "
            "restart with `raynb start --max-workers N`"
        )
    if request.use_gpu and n > total_gpus:
        fix = (
            f"Ask for at most {total_gpus} workers, run on CPU (use_gpu=False)"
            if total_gpus
            else "Run on CPU (use_gpu=False)"
        )  # not "at most 0 workers"
        return (
            f"use_gpu=True with num_workers={n} needs {n} GPUs (one per rank); this "
            f"cluster has {total_gpus} ({_per_node(snapshot, 'gpus', 'GPUs:')}). {fix}, "
            "or add a GPU node with `raynb node`"
        )
    return None


def _per_node(snapshot: Snapshot, field: str, what: str) -> str:
    """``"local at most 4, n1 at most 2"``: what each node has of ``field``."""
    return ", ".join(f"{node.node_id} {what} {getattr(node, field)}" for node in snapshot.nodes) or "no node"


def place(request: Request, snapshot: Snapshot) -> Placement | Fork | Wait:
    """Where ``request``'s ranks go now, or what must happen first (see the module doc).
    Only workers of the request's kind are taken; it waits for forks of its kind."""
    whole, snapshot = snapshot, of_kind(snapshot, request.kind)
    if request.min_workers is not None:
        sized = elastic_size(request, snapshot)
        if not isinstance(sized, int):
            return sized
        request = replace(request, num_workers=sized, min_workers=None)
    n = request.num_workers
    idle = [w for w in snapshot.workers if not w.busy]
    if len(idle) < n:
        return _fork(n - len(idle), snapshot, request.kind, whole)
    if request.use_gpu:
        idle = _gpu_eligible(idle, snapshot)
        if len(idle) < n:
            return Wait(f"the run needs {n} free GPUs; {len(idle)} are free with an idle worker")
    chosen = (
        _pick(idle, n, snapshot.groups) if request.strategy == "PACK" else _spread(idle, n, snapshot.groups)
    )
    return Placement(tuple(w.worker_id for w in chosen), _assign_gpus(chosen, snapshot, request.use_gpu))


def elastic_size(request: Request, snapshot: Snapshot, own: tuple = ()) -> int | Fork | Wait:
    """How many ranks an elastic request gets: the most, up to ``num_workers`` (its max),
    that the idle workers plus the room to fork more can hold, when that is at least
    ``min_workers``; else what must happen first (a :class:`Fork` whose ``unplaceable``
    counts the workers missing to reach the min, or a :class:`Wait` for GPUs).

    ``request.now``: count only the workers idle now (a restart after a lost rank goes on
    with what remains rather than wait for replacements). ``own``: worker ids counted as
    idle although busy (the run's own, when asking whether it could grow)."""
    lo, hi = request.min_workers, request.num_workers
    idle = [w for w in snapshot.workers if not w.busy or w.worker_id in own]
    if request.use_gpu:
        free_gpus = sum(len(node.free_gpus) for node in snapshot.nodes) + len(own)
        idle = _gpu_eligible(idle, snapshot) if not own else idle[:free_gpus]
    if request.now and len(idle) >= lo:
        return min(len(idle), hi)
    room = sum(max(0, node.max_workers - node.num_workers) for node in snapshot.nodes)
    reachable = min(hi, len(idle) + room)
    if request.use_gpu:
        reachable = min(reachable, free_gpus)
        if reachable < lo:
            return Wait(f"{reachable} of min {lo} GPUs free; waiting for {lo - reachable} more")
    if reachable < lo:
        return Fork(_fork(lo - len(idle), snapshot, request.kind).forks, lo - reachable, request.kind)
    return reachable


def of_kind(snapshot: Snapshot, kind: str) -> Snapshot:
    """``snapshot`` with only the workers of ``kind`` (the nodes' counts keep them all)."""
    if not snapshot.other_kinds and kind == "torch":
        return snapshot
    return replace(snapshot, workers=tuple(w for w in snapshot.workers if w.kind == kind))


def _fork(missing: int, snapshot: Snapshot, kind: str = "torch", whole: Snapshot | None = None) -> Fork:
    """Fork what is missing beyond the forks of ``kind`` already in flight, local node
    first, each node up to its maximum. Where no node has room, idle workers of other
    kinds in ``whole`` are retired for it (``Fork.retire``), their nodes' forks waiting
    for their exits."""
    missing -= sum(spawning_of(node, kind) for node in snapshot.nodes)
    forks = {}
    order = sorted(snapshot.nodes, key=lambda node: node.node_id != LOCAL_NODE_ID)
    for node in order:
        if missing <= 0:
            break
        k = min(node.max_workers - node.num_workers - node.spawning, missing)
        if k > 0:
            forks[node.node_id] = k
            missing -= k
    others = [w for w in (whole.workers if whole is not None else ()) if not w.busy and w.kind != kind]
    if 0 < missing <= len(others):  # retired only if that is enough: no warm worker lost for a wait
        retire = tuple(w.worker_id for node in order for w in others if w.node_id == node.node_id)[:missing]
        for wid in retire:
            node_id = next(w.node_id for w in others if w.worker_id == wid)
            forks[node_id] = forks.get(node_id, 0) + 1
        return Fork(forks, 0, kind, retire)
    return Fork(forks, max(0, missing), kind)


def _gpu_eligible(idle: list, snapshot: Snapshot) -> list:
    """Idle workers, at most one per free GPU of their node."""
    out = []
    for node in snapshot.nodes:
        on_node = [w for w in idle if w.node_id == node.node_id]
        out += on_node[: len(node.free_gpus)]
    return out


def _pick(idle: list, n: int, groups: tuple) -> list:
    by_id = {w.worker_id: w for w in idle}
    # Reuse a process group whose members are all idle: no rendezvous needed.
    for members in groups:
        if len(members) == n and all(m in by_id for m in members):
            return [by_id[m] for m in members]
    # Otherwise pack onto as few nodes as possible: the local node first, then the nodes
    # with the most idle workers (greedy, largest first, needs the fewest nodes). Taking
    # node by node keeps each node's ranks contiguous, so local ranks count 0..k-1.
    per_node: dict[str, list] = {}
    for w in idle:
        per_node.setdefault(w.node_id, []).append(w)
    order = sorted(per_node, key=lambda nid: (nid != LOCAL_NODE_ID, -len(per_node[nid]), nid))
    packed = [w for nid in order for w in sorted(per_node[nid], key=lambda w: w.worker_id)]
    return packed[:n]


def _spread(idle: list, n: int, groups: tuple) -> list:
    """SPREAD: ranks over as many nodes as have idle workers, as evenly as they allow
    (round robin, the nodes with the most idle workers first), each node's contiguous.
    A process group already formed with that spread is reused."""
    per_node: dict[str, list] = {}
    for w in idle:
        per_node.setdefault(w.node_id, []).append(w)
    order = sorted(per_node, key=lambda nid: (-len(per_node[nid]), nid != LOCAL_NODE_ID, nid))
    counts = dict.fromkeys(order, 0)
    left = n
    while left > 0:
        for nid in order:
            if left > 0 and counts[nid] < len(per_node[nid]):
                counts[nid] += 1
                left -= 1
    want = sorted(c for c in counts.values() if c)
    by_id = {w.worker_id: w for w in idle}
    for members in groups:
        if len(members) == n and all(m in by_id for m in members):
            spread: dict[str, int] = {}
            for m in members:
                spread[by_id[m].node_id] = spread.get(by_id[m].node_id, 0) + 1
            if sorted(spread.values()) == want:
                return [by_id[m] for m in members]
    return [w for nid in order for w in sorted(per_node[nid], key=lambda w: w.worker_id)[: counts[nid]]]


def _assign_gpus(chosen: list, snapshot: Snapshot, use_gpu: bool) -> tuple:
    if not use_gpu:
        return (None,) * len(chosen)
    free = {node.node_id: list(node.free_gpus) for node in snapshot.nodes}
    return tuple(free[w.node_id].pop(0) for w in chosen)
