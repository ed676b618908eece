"""Worker kinds in the scheduler (pure): a run is placed only on idle workers of its kind
(TensorflowTrainer's ``tensorflow``, everything else ``torch``), forks its own kind when
they are too few, counts only its kind's forks in flight, and retires idle workers of
another kind when no node has room; and the registry keeps each worker's kind."""

from __future__ import annotations

from raynb.cluster.head.registry import NodeInfo, Registry, WorkerInfo
from raynb.cluster.head.scheduler import Fork, NodeView, Placement, Request, Snapshot, WorkerView, place

LOCAL = "local"


def _snap(workers, max_workers=8, spawning=0, spawning_kinds=()):
    node = NodeView(LOCAL, max_workers, spawning, (), len(workers), 0, spawning_kinds)
    other = sum(w.kind != "torch" for w in workers)
    return Snapshot(nodes=(node,), workers=tuple(workers), other_kinds=other)


def _w(i, kind="torch", busy=False):
    return WorkerView(f"w{i}", LOCAL, busy, kind)


def test_a_tensorflow_run_takes_only_tensorflow_workers():
    snap = _snap([_w(0), _w(1), _w(2, "tensorflow"), _w(3), _w(4, "tensorflow")])
    got = place(Request(2, kind="tensorflow"), snap)
    assert got == Placement(("w2", "w4"), (None, None))


def test_a_torch_run_never_takes_a_tensorflow_worker():
    snap = _snap([_w(0), _w(1, "tensorflow"), _w(2, "tensorflow"), _w(3)])
    assert place(Request(2), snap) == Placement(("w0", "w3"), (None, None))
    # Three torch ranks, two torch workers idle: fork one torch worker, never take a TF one.
    got = place(Request(3), snap)
    assert isinstance(got, Fork) and got.forks == {LOCAL: 1} and got.kind == "torch", got


def test_too_few_of_its_kind_forks_its_kind_although_torch_workers_are_idle():
    snap = _snap([_w(0), _w(1), _w(2), _w(3), _w(4, "tensorflow")])
    got = place(Request(2, kind="tensorflow"), snap)
    assert got == Fork({LOCAL: 1}, 0, "tensorflow"), got


def test_only_forks_of_its_own_kind_in_flight_count():
    workers = [_w(0), _w(1)]
    # Two torch forks in flight do not stand for the TensorFlow run's two.
    got = place(Request(2, kind="tensorflow"), _snap(workers, spawning=2))
    assert got == Fork({LOCAL: 2}, 0, "tensorflow"), got
    # Two TensorFlow forks in flight: wait for them, fork nothing more.
    got = place(
        Request(2, kind="tensorflow"), _snap(workers, spawning=2, spawning_kinds=(("tensorflow", 2),))
    )
    assert got == Fork({}, 0, "tensorflow"), got
    # ... and they do not count as the torch run's forks.
    got = place(Request(3), _snap(workers, spawning=2, spawning_kinds=(("tensorflow", 2),)))
    assert got == Fork({LOCAL: 1}, 0, "torch"), got


def test_no_room_retires_idle_workers_of_another_kind():
    # A full node (4 of 4): a torch run of 2 with only TF workers idle retires two of them.
    snap = _snap(
        [_w(0, "tensorflow"), _w(1, "tensorflow"), _w(2, busy=True), _w(3, busy=True)], max_workers=4
    )
    got = place(Request(2), snap)
    assert got == Fork({LOCAL: 2}, 0, "torch", ("w0", "w1")), got
    # A busy worker of another kind is never retired: what cannot be made room for waits.
    snap = _snap([_w(0, "tensorflow", busy=True), _w(1), _w(2), _w(3)], max_workers=4)
    got = place(Request(2, kind="tensorflow"), snap)
    assert got == Fork({LOCAL: 2}, 0, "tensorflow", ("w1", "w2")), got
    got = place(Request(4, kind="tensorflow"), snap)
    # Three retired would still leave it one short (w0 is busy): none is, it waits for w0.
    assert got == Fork({}, 4, "tensorflow"), got


def test_elastic_tensorflow_run_counts_only_its_kind():
    snap = _snap([_w(0), _w(1), _w(2, "tensorflow")])
    got = place(Request(4, min_workers=1, now=True, kind="tensorflow"), snap)
    assert got == Placement(("w2",), (None,)), got


def test_the_registry_keeps_each_workers_kind_and_its_forks_in_flight():
    reg = Registry()
    node = NodeInfo(LOCAL, b"n", "h", "127.0.0.1", 1, num_workers=2, max_workers=8)
    reg.add_node(node)
    assert reg.asked(node, 2) == {"count": 2}
    assert reg.asked(node, 1, "tensorflow") == {"count": 1, "kind": "tensorflow"}
    assert node.spawning == 3 and node.spawning_kinds == {"tensorflow": 1}
    reg.add_worker(WorkerInfo("a", b"a", LOCAL, 10, "h", "127.0.0.1"))
    reg.add_worker(WorkerInfo("b", b"b", LOCAL, 11, "h", "127.0.0.1", kind="tensorflow"))
    assert node.spawning == 1 and node.spawning_kinds == {"tensorflow": 0}
    snap = reg.snapshot()
    assert [(w.worker_id, w.kind) for w in snap.workers] == [("a", "torch"), ("b", "tensorflow")]
    assert snap.other_kinds == 1 and dict(snap.nodes[0].spawning_kinds) == {"tensorflow": 0}
    assert place(Request(1, kind="tensorflow"), snap) == Placement(("b",), (None,))
