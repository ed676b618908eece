"""The scheduler as a pure function: registry snapshots in, placement decisions out.

No processes and no sockets: every case is built from ``Snapshot``/``NodeView``/
``WorkerView``/``Request`` values and compared to the exact decision expected
(which workers, in which rank order, on which GPUs; or how many forks where).
"""

from __future__ import annotations

from raynb.cluster.head import scheduler
from raynb.cluster.head.scheduler import (
    Fork,
    NodeView,
    Placement,
    Request,
    Snapshot,
    Wait,
    WorkerView,
    check,
    place,
)

LOCAL = scheduler.LOCAL_NODE_ID


def _workers(node_id: str, n: int, busy: tuple = ()) -> tuple:
    """``n`` workers ``<node>-w0..`` on ``node_id``; the indices in ``busy`` run something."""
    return tuple(WorkerView(f"{node_id}-w{i}", node_id, i in busy) for i in range(n))


def _snapshot(*nodes: NodeView, workers: tuple, groups: tuple = ()) -> Snapshot:
    return Snapshot(nodes=tuple(nodes), workers=tuple(workers), groups=tuple(groups))


def _node(
    node_id: str,
    max_workers: int = 4,
    spawning: int = 0,
    free_gpus: tuple = (),
    num_workers: int = 0,
    gpus: int | None = None,
) -> NodeView:
    return NodeView(
        node_id, max_workers, spawning, free_gpus, num_workers, len(free_gpus) if gpus is None else gpus
    )


def _contiguous_by_node(worker_ids: tuple, snapshot: Snapshot) -> bool:
    """Each node's ranks form one block (so local ranks count 0..k-1 on every node)."""
    node_of = {w.worker_id: w.node_id for w in snapshot.workers}
    blocks = [
        node_of[w] for i, w in enumerate(worker_ids) if i == 0 or node_of[w] != node_of[worker_ids[i - 1]]
    ]
    return len(blocks) == len(set(blocks))


# -- gang placement -------------------------------------------------------------------
def test_enough_idle_workers_gives_exactly_n_distinct_workers():
    """Four idle, three asked: exactly three distinct workers, in node then id order, no GPUs."""
    snap = _snapshot(_node(LOCAL, num_workers=4), workers=_workers(LOCAL, 4))
    decision = place(Request(3), snap)
    assert decision == Placement(("local-w0", "local-w1", "local-w2"), (None, None, None))
    assert len(set(decision.worker_ids)) == 3


def test_all_idle_workers_taken_when_exactly_enough():
    """A request for every idle worker (the busy one left out) is placed on all of them."""
    snap = _snapshot(_node(LOCAL, num_workers=4), workers=_workers(LOCAL, 4, busy=(1,)))
    assert place(Request(3), snap) == Placement(("local-w0", "local-w2", "local-w3"), (None, None, None))


def test_too_few_idle_workers_forks_and_never_places_part_of_a_gang():
    """Two idle of four asked: fork the missing two (gang: all ranks or none)."""
    snap = _snapshot(_node(LOCAL, max_workers=4, num_workers=2), workers=_workers(LOCAL, 2))
    assert place(Request(4), snap) == Fork({LOCAL: 2}, 0)


def test_fork_subtracts_forks_already_in_flight():
    """One fork already asked for: only the other missing worker is forked now."""
    snap = _snapshot(_node(LOCAL, max_workers=8, spawning=1, num_workers=2), workers=_workers(LOCAL, 2))
    assert place(Request(4), snap) == Fork({LOCAL: 1}, 0)


def test_fork_fills_the_local_node_first_even_when_registered_later():
    """The local node takes forks first, up to its maximum; the rest go to the next node."""
    snap = _snapshot(
        _node("n1", max_workers=8, num_workers=0),
        _node(LOCAL, max_workers=3, num_workers=1),
        workers=_workers(LOCAL, 1),
    )
    decision = place(Request(5), snap)
    assert decision == Fork({LOCAL: 2, "n1": 2}, 0)
    assert list(decision.forks) == [LOCAL, "n1"]


def test_fork_respects_each_nodes_max_workers_and_counts_the_unplaceable():
    """Room is max_workers minus workers minus forks in flight; what no node has room for
    is ``unplaceable`` (the run waits for others to end)."""
    snap = _snapshot(
        _node(LOCAL, max_workers=2, num_workers=2),
        _node("n1", max_workers=4, spawning=1, num_workers=1),
        workers=_workers(LOCAL, 2) + _workers("n1", 1),
    )
    # 3 idle, 7 asked: 4 missing, 1 in flight -> 3 to place; local is full, n1 has room for 2.
    assert place(Request(7), snap) == Fork({"n1": 2}, 1)


def test_fork_is_empty_when_enough_forks_are_in_flight():
    """Forks in flight cover what is missing: fork nothing more, and nothing is unplaceable."""
    snap = _snapshot(_node(LOCAL, max_workers=4, spawning=2, num_workers=2), workers=_workers(LOCAL, 2))
    assert place(Request(4), snap) == Fork({}, 0)


# -- rank order ---------------------------------------------------------------------------
def test_ranks_of_one_node_are_contiguous_with_interleaved_registration_and_local_first():
    """Workers of two nodes registered alternately: the local node's come first, then the
    other's, each block contiguous (a worker's local rank is then its index in its block)."""
    workers = (
        WorkerView("n1-w0", "n1"),
        WorkerView("local-w0", LOCAL),
        WorkerView("n1-w1", "n1"),
        WorkerView("local-w1", LOCAL),
        WorkerView("n1-w2", "n1"),
        WorkerView("local-w2", LOCAL),
    )
    snap = _snapshot(_node("n1", num_workers=3), _node(LOCAL, num_workers=3), workers=workers)
    decision = place(Request(5), snap)
    assert decision == Placement(("local-w0", "local-w1", "local-w2", "n1-w0", "n1-w1"), (None,) * 5)
    assert _contiguous_by_node(decision.worker_ids, snap)


def test_ranks_of_remote_nodes_interleaved_are_contiguous():
    """Without the local node, two remote nodes' interleaved workers still form blocks."""
    workers = (
        WorkerView("b-w0", "b"),
        WorkerView("a-w0", "a"),
        WorkerView("b-w1", "b"),
        WorkerView("a-w1", "a"),
    )
    snap = _snapshot(_node("b", num_workers=2), _node("a", num_workers=2), workers=workers)
    decision = place(Request(4), snap)
    assert decision == Placement(("a-w0", "a-w1", "b-w0", "b-w1"), (None,) * 4)
    assert _contiguous_by_node(decision.worker_ids, snap)


# -- process group reuse ----------------------------------------------------------------
def test_reuses_an_idle_process_group_of_the_right_size_in_its_rank_order():
    """A group of idle workers of the asked size is reused as it is (its rank order, not
    the sorted one): a warm re-run skips the rendezvous."""
    snap = _snapshot(
        _node(LOCAL, num_workers=4), workers=_workers(LOCAL, 4), groups=(("local-w3", "local-w1"),)
    )
    assert place(Request(2), snap) == Placement(("local-w3", "local-w1"), (None, None))


def test_reuses_the_first_matching_group_among_several():
    """Groups of the wrong size are skipped; the first group that fits is the one reused."""
    snap = _snapshot(
        _node(LOCAL, num_workers=4),
        workers=_workers(LOCAL, 4),
        groups=(("local-w0", "local-w1", "local-w2"), ("local-w2", "local-w3"), ("local-w1", "local-w0")),
    )
    assert place(Request(2), snap).worker_ids == ("local-w2", "local-w3")


def test_does_not_reuse_a_group_of_another_size():
    """A 3-worker group is not cut down for a 2-rank run: the default pick is used."""
    snap = _snapshot(
        _node(LOCAL, num_workers=4),
        workers=_workers(LOCAL, 4),
        groups=(("local-w3", "local-w2", "local-w1"),),
    )
    assert place(Request(2), snap) == Placement(("local-w0", "local-w1"), (None, None))


def test_does_not_reuse_a_group_with_a_busy_member():
    """A group one of whose members runs another run cannot be reused."""
    snap = _snapshot(
        _node(LOCAL, num_workers=4), workers=_workers(LOCAL, 4, busy=(3,)), groups=(("local-w3", "local-w2"),)
    )
    assert place(Request(2), snap) == Placement(("local-w0", "local-w1"), (None, None))


def test_does_not_reuse_a_group_with_a_member_that_is_gone():
    """A group naming a worker that no longer exists is not reused."""
    snap = _snapshot(
        _node(LOCAL, num_workers=3), workers=_workers(LOCAL, 3), groups=(("local-w2", "local-w9"),)
    )
    assert place(Request(2), snap) == Placement(("local-w0", "local-w1"), (None, None))


# -- GPUs -----------------------------------------------------------------------------
def test_gpu_ranks_get_each_nodes_free_gpus_in_order_one_rank_per_gpu():
    """use_gpu: at most one rank per free GPU of a node; a node's ranks get its free GPUs in
    their order, distinct within the node (the third local worker has no GPU left)."""
    snap = _snapshot(
        _node(LOCAL, free_gpus=(2, 5), num_workers=3),
        _node("n1", free_gpus=(0, 1), num_workers=2),
        workers=_workers(LOCAL, 3) + _workers("n1", 2),
    )
    decision = place(Request(3, use_gpu=True), snap)
    assert decision == Placement(("local-w0", "local-w1", "n1-w0"), (2, 5, 0))
    node_of = {w.worker_id: w.node_id for w in snap.workers}
    per_node = {}
    for wid, gpu in zip(decision.worker_ids, decision.gpu_ids):
        per_node.setdefault(node_of[wid], []).append(gpu)
    assert all(len(g) == len(set(g)) for g in per_node.values())


def test_gpu_placement_uses_all_free_gpus_over_nodes():
    """Four ranks on 2 + 2 free GPUs: every GPU is used once, the local node's first."""
    snap = _snapshot(
        _node("n1", free_gpus=(3, 1), num_workers=3),
        _node(LOCAL, free_gpus=(0, 1), num_workers=3),
        workers=_workers("n1", 3) + _workers(LOCAL, 3),
    )
    assert place(Request(4, use_gpu=True), snap) == Placement(
        ("local-w0", "local-w1", "n1-w0", "n1-w1"), (0, 1, 3, 1)
    )


def test_gpu_request_waits_when_workers_are_enough_but_free_gpus_are_not():
    """Four idle workers but one free GPU: Wait (forking would not help), naming the count."""
    snap = _snapshot(
        _node(LOCAL, free_gpus=(0,), num_workers=2),
        _node("n1", free_gpus=(), num_workers=2),
        workers=_workers(LOCAL, 2) + _workers("n1", 2),
    )
    assert place(Request(2, use_gpu=True), snap) == Wait(
        "the run needs 2 free GPUs; 1 are free with an idle worker"
    )


def test_gpu_request_with_too_few_workers_forks_first():
    """Too few idle workers for a GPU run: fork them (the GPU question comes after)."""
    snap = _snapshot(_node(LOCAL, free_gpus=(0, 1), num_workers=1), workers=_workers(LOCAL, 1))
    assert place(Request(2, use_gpu=True), snap) == Fork({LOCAL: 1}, 0)


def test_gpu_ids_are_none_without_use_gpu_even_on_a_gpu_node():
    """A CPU run on a node with free GPUs is given no GPU, and may use more ranks than GPUs."""
    snap = _snapshot(_node(LOCAL, free_gpus=(0, 1), num_workers=3), workers=_workers(LOCAL, 3))
    assert place(Request(3), snap) == Placement(("local-w0", "local-w1", "local-w2"), (None, None, None))


def test_gpu_reuse_of_a_group_assigns_its_nodes_gpus_in_group_rank_order():
    """A reused group on a GPU node gets the node's free GPUs in the group's rank order."""
    snap = _snapshot(
        _node(LOCAL, free_gpus=(4, 6), num_workers=2),
        workers=_workers(LOCAL, 2),
        groups=(("local-w1", "local-w0"),),
    )
    assert place(Request(2, use_gpu=True), snap) == Placement(("local-w1", "local-w0"), (4, 6))


# -- a second concurrent run --------------------------------------------------------------
def test_a_second_concurrent_run_gets_the_other_idle_workers_or_a_fork():
    """A first 2-rank run takes 2 of 4 idle workers; with those busy, a second 2-rank run gets
    the other two, and a 4-rank run must wait (nothing has room: all unplaceable) or, on a
    node with room, fork the two missing."""
    first = place(Request(2), _snapshot(_node(LOCAL, num_workers=4), workers=_workers(LOCAL, 4)))
    assert first == Placement(("local-w0", "local-w1"), (None, None))
    taken = {0, 1}
    busy = _snapshot(
        _node(LOCAL, max_workers=4, num_workers=4), workers=_workers(LOCAL, 4, busy=tuple(taken))
    )
    second = place(Request(2), busy)
    assert second == Placement(("local-w2", "local-w3"), (None, None))
    assert not set(second.worker_ids) & set(first.worker_ids)
    assert place(Request(4), busy) == Fork({}, 2)
    roomy = _snapshot(
        _node(LOCAL, max_workers=8, num_workers=4), workers=_workers(LOCAL, 4, busy=tuple(taken))
    )
    assert place(Request(4), roomy) == Fork({LOCAL: 2}, 0)


def test_a_second_gpu_run_gets_the_remaining_gpus():
    """After a first GPU run took GPU 0 (no longer free), the next GPU run gets GPU 1."""
    snap = _snapshot(_node(LOCAL, free_gpus=(1,), num_workers=2), workers=_workers(LOCAL, 2, busy=(0,)))
    assert place(Request(1, use_gpu=True), snap) == Placement(("local-w1",), (1,))


# -- check at submit time -----------------------------------------------------------------
def _two_nodes() -> Snapshot:
    return _snapshot(
        _node(LOCAL, num_workers=2),
        _node("n1", num_workers=2),
        workers=_workers(LOCAL, 2) + _workers("n1", 2),
    )


def test_check_accepts_a_feasible_request_up_to_capacity():
    """A request the cluster can hold (up to capacity; GPUs up to their total) is fine,
    even when its workers are not all there yet."""
    snap = _two_nodes()
    assert check(Request(8), snap, capacity=8, total_gpus=0) is None
    assert check(Request(2, use_gpu=True), snap, capacity=8, total_gpus=2) is None
    assert check(Request(5), snap, capacity=8, total_gpus=2) is None  # CPU: GPUs don't count


def test_check_refuses_more_workers_than_capacity_naming_the_fix():
    """Over capacity: the message names the asked count, the capacity, the node count and
    `raynb start --max-workers`."""
    why = check(Request(9), _two_nodes(), capacity=8, total_gpus=0)
    assert why is not None
    assert "num_workers=9" in why
    assert "(8 workers over 2 node(s): local at most 4, n1 at most 4)" in why  # what each node holds
    assert "ask for at most 8" in why
    assert "raynb start --max-workers" in why


def test_check_refuses_more_gpu_ranks_than_gpus_naming_the_count():
    """use_gpu with more ranks than GPUs in the cluster: the message names both counts."""
    snap = _snapshot(
        _node(LOCAL, num_workers=2, free_gpus=(1,), gpus=2),
        _node("n1", num_workers=2),
        workers=_workers(LOCAL, 2) + _workers("n1", 2),
    )
    why = check(Request(3, use_gpu=True), snap, capacity=8, total_gpus=2)
    assert why is not None
    assert "needs 3 GPUs" in why
    assert "this cluster has 2 (local GPUs: 2, n1 GPUs: 0)" in why  # held ones count: which node has what
    assert "use_gpu=False" in why


def test_check_names_capacity_before_gpus():
    """Over both limits: the capacity is the first thing to fix, so it is what is named."""
    why = check(Request(9, use_gpu=True), _two_nodes(), capacity=8, total_gpus=2)
    assert "raynb start --max-workers" in why and "GPUs" not in why


def test_packs_onto_the_fewest_nodes():
    """After the local node, the nodes with the most idle workers are filled first: a
    4-rank run goes to node b (4 idle) alone, not 1 rank on a and 3 on b."""
    s = Snapshot(
        nodes=(NodeView("a", 4, 0, (), 1), NodeView("b", 4, 0, (), 4)),
        workers=(WorkerView("a-w0", "a"),) + tuple(WorkerView(f"b-w{i}", "b") for i in range(4)),
    )
    assert place(Request(4), s) == Placement(("b-w0", "b-w1", "b-w2", "b-w3"), (None,) * 4)
    # 5 ranks need both: b's four first (contiguous), then a's.
    assert place(Request(5), s).worker_ids == ("b-w0", "b-w1", "b-w2", "b-w3", "a-w0")


# -- PACK and SPREAD (ScalingConfig(placement_strategy=...)) ----------------------------
def test_pack_fills_the_fullest_node_first():
    """PACK: 4 ranks with n1 holding 4 idle and n2 2: all on n1 (fewest nodes)."""
    snap = _snapshot(
        _node("n1", num_workers=4), _node("n2", num_workers=2), workers=_workers("n1", 4) + _workers("n2", 2)
    )
    d = place(Request(4, strategy="PACK"), snap)
    assert d == Placement(("n1-w0", "n1-w1", "n1-w2", "n1-w3"), (None,) * 4)


def test_spread_puts_ranks_on_every_node_evenly_and_contiguously():
    """SPREAD: 4 ranks over n1 (4 idle) and n2 (2 idle): two on each, each node's ranks a block."""
    snap = _snapshot(
        _node("n1", num_workers=4), _node("n2", num_workers=2), workers=_workers("n1", 4) + _workers("n2", 2)
    )
    d = place(Request(4, strategy="SPREAD"), snap)
    assert d == Placement(("n1-w0", "n1-w1", "n2-w0", "n2-w1"), (None,) * 4)
    assert _contiguous_by_node(d.worker_ids, snap)


def test_spread_takes_what_a_small_node_has_and_the_rest_elsewhere():
    """SPREAD: 5 ranks, n1 with 4 idle, n2 with 1: n2 gives its one, n1 the other four."""
    snap = _snapshot(
        _node("n1", num_workers=4), _node("n2", num_workers=1), workers=_workers("n1", 4) + _workers("n2", 1)
    )
    d = place(Request(5, strategy="SPREAD"), snap)
    assert sorted(d.worker_ids) == sorted(["n1-w0", "n1-w1", "n1-w2", "n1-w3", "n2-w0"])
    assert _contiguous_by_node(d.worker_ids, snap)


def test_spread_reuses_a_group_only_when_it_is_spread_alike():
    """A packed group of n1's four is not reused by SPREAD; a 2+2 group is."""
    snap_packed = _snapshot(
        _node("n1", num_workers=4),
        _node("n2", num_workers=2),
        workers=_workers("n1", 4) + _workers("n2", 2),
        groups=(("n1-w0", "n1-w1", "n1-w2", "n1-w3"),),
    )
    assert set(place(Request(4, strategy="SPREAD"), snap_packed).worker_ids) == {
        "n1-w0",
        "n1-w1",
        "n2-w0",
        "n2-w1",
    }
    spread_group = ("n2-w1", "n2-w0", "n1-w3", "n1-w2")
    snap_spread = _snapshot(
        _node("n1", num_workers=4),
        _node("n2", num_workers=2),
        workers=_workers("n1", 4) + _workers("n2", 2),
        groups=(spread_group,),
    )
    assert place(Request(4, strategy="SPREAD"), snap_spread).worker_ids == spread_group
    assert place(Request(4, strategy="PACK"), snap_packed).worker_ids == ("n1-w0", "n1-w1", "n1-w2", "n1-w3")


def test_check_names_an_unknown_strategy():
    why = check(Request(2, strategy="STRICT_PACK"), _snapshot(_node("n1"), workers=_workers("n1", 2)), 4, 0)
    assert "placement_strategy='STRICT_PACK'" in why and "SPREAD" in why


def test_a_gpu_request_the_cluster_can_never_hold_names_a_fix_that_exists():
    # With no GPU at all the message said "Ask for at most 0 workers".
    none = check(Request(2, use_gpu=True), _snapshot(_node(LOCAL), workers=_workers(LOCAL, 2)), 4, 0)
    assert "needs 2 GPUs (one per rank); this cluster has 0" in none
    assert "at most 0" not in none and "Run on CPU (use_gpu=False), or add a GPU node" in none
    one = check(
        Request(2, use_gpu=True), _snapshot(_node(LOCAL, free_gpus=(0,)), workers=_workers(LOCAL, 2)), 4, 1
    )
    assert "Ask for at most 1 workers, run on CPU (use_gpu=False), or add a GPU node" in one
