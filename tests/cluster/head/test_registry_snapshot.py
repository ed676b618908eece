"""The registry's snapshot for the scheduler keeps its workers' and groups' views while
nothing of them changed, and is always what a snapshot built afresh would be."""

from __future__ import annotations

import random

from raynb.cluster.head.registry import NodeInfo, Registry, WorkerInfo
from raynb.cluster.head.scheduler import NodeView, Snapshot, WorkerView


def _fresh(reg: Registry) -> Snapshot:
    return Snapshot(
        nodes=tuple(
            NodeView(
                n.node_id,
                n.max_workers,
                n.spawning,
                tuple(n.free_gpus),
                reg.workers_on(n.node_id),
                len(n.gpus),
            )
            for n in reg.nodes.values()
        ),
        workers=tuple(WorkerView(w.worker_id, w.node_id, w.busy) for w in reg.workers.values()),
        groups=tuple(reg.groups),
    )


def test_snapshot_is_always_the_registry_as_it_is_now():
    rnd = random.Random(7)
    reg = Registry()
    serial = 0
    for step in range(600):
        r = rnd.random()
        ids = sorted(reg.workers)
        if r < 0.1 or not reg.nodes:
            n = f"n{step}"
            reg.add_node(NodeInfo(n, n.encode(), "h", "ip", 1, 1, 4, gpus=[0, 1] if step % 2 else []))
        elif r < 0.3:
            serial += 1
            reg.add_worker(WorkerInfo(f"w{serial}", b"w", rnd.choice(sorted(reg.nodes)), serial, "h", "ip"))
        elif r < 0.5 and ids:
            w = reg.workers[rnd.choice(ids)]
            w.run_id = None if w.busy else "r"
        elif r < 0.6 and ids:
            reg.remove_worker(rnd.choice(ids))
        elif r < 0.7 and len(ids) >= 2:
            reg.group_key(tuple(rnd.sample(ids, 2)), "gloo", None)
        elif r < 0.75 and ids:
            reg.forget_groups_with(rnd.choice(ids))
        elif r < 0.8 and len(reg.nodes) > 1:
            reg.remove_node(rnd.choice(sorted(reg.nodes)))
        elif r < 0.9:
            node = reg.nodes[rnd.choice(sorted(reg.nodes))]
            node.spawning = rnd.randrange(3)  # set by the queue and the pool directly
            if node.gpus:
                reg.take_gpu(node.node_id, rnd.choice(node.gpus))
        assert reg.snapshot() == _fresh(reg), f"step {step}"


def test_snapshot_keeps_the_workers_views_while_nothing_changed():
    reg = Registry()
    reg.add_node(NodeInfo("a", b"a", "h", "ip", 1, 2, 2))
    for i in range(2):
        reg.add_worker(WorkerInfo(f"a-w{i}", b"w", "a", i, "h", "ip"))
    first, again = reg.snapshot(), reg.snapshot()
    assert again.workers is first.workers and again.groups is first.groups
    reg.workers["a-w1"].run_id = "r"
    assert reg.snapshot().workers == (WorkerView("a-w0", "a", False), WorkerView("a-w1", "a", True))
