"""A running rank's thread share grows only into cores that other work leaves idle: on a
node whose load average shows other processes filling its cores, the last of four one-rank
trials keeps its one thread (two OpenMP threads there wait on each other's descheduled
slices: the trial ran 4x slower than with one), and grows once the load drops. A share
still shrinks at once, loaded or not (a registry of its own, no cluster)."""

from __future__ import annotations

from raynb.cluster.head.pool import WorkerPool, room
from raynb.cluster.head.registry import NodeInfo, Registry, WorkerInfo


def _node(cpus: int = 2, workers: int = 4):
    reg = Registry()
    reg.add_node(NodeInfo("n0", b"node:n0", "h", "10.0.0.1", workers, workers, 16, cpus=cpus))
    for j in range(workers):
        reg.add_worker(WorkerInfo(f"w{j}", f"worker:w{j}".encode(), "n0", 1000 + j, "h", "ip"))
    sent = []
    pool = WorkerPool(reg, lambda *a: sent.append((a[0].decode(), a[2]["num_threads"])), lambda *a: None, 60)
    pool.tick(0.0, runs_waiting=False)  # the workers' joining
    return reg, pool, sent


def _busy(reg: Registry, ids, threads: int) -> None:
    for i in ids:
        w = reg.workers[f"w{i}"]
        w.run_id, w.threads, w.attempt = f"trial{i}", threads, 0


def _idle(reg: Registry, ids) -> None:
    for i in ids:
        reg.workers[f"w{i}"].run_id = None


def test_room_is_the_cores_other_work_leaves_idle():
    reg, _, _ = _node(cpus=2, workers=4)
    node = reg.nodes["n0"]
    assert room(reg, "n0") == 2  # no load reported yet: as before
    node.load = 3.9  # raynb's own four ranks can make this much
    assert room(reg, "n0") == 2
    node.load = 12.5  # other processes: 8.5 runnable beyond what raynb's 4 workers can be
    assert room(reg, "n0") <= 0
    node.load = 5.2
    assert room(reg, "n0") == 1


def test_the_last_trial_keeps_its_share_on_a_loaded_node_and_grows_when_it_is_idle():
    reg, pool, sent = _node(cpus=2, workers=4)
    _busy(reg, range(4), threads=1)
    pool.tick(1.0, runs_waiting=False)
    assert sent == []  # 2 cores over 4 ranks: one each, as they had
    reg.nodes["n0"].load = 14.0  # the machine is shared with other work
    _idle(reg, range(1, 4))  # three trials end
    pool.tick(2.0, runs_waiting=False)
    assert sent == [], sent  # the last one stays at one thread
    pool.reshare("n0")  # the next heartbeat, still loaded: nothing
    assert sent == [] and reg.workers["w0"].threads == 1
    reg.nodes["n0"].load = 1.2  # the other work ended
    pool.reshare("n0")
    assert sent == [("worker:w0", 2)] and reg.workers["w0"].threads == 2


def test_an_idle_node_grows_the_share_at_once_and_a_loaded_one_still_shrinks_it():
    reg, pool, sent = _node(cpus=2, workers=4)
    reg.nodes["n0"].load = 3.5  # raynb's own ranks only
    _busy(reg, range(2), threads=1)
    pool.tick(1.0, runs_waiting=False)
    _idle(reg, [1])
    pool.tick(2.0, runs_waiting=False)
    assert sent == [("worker:w0", 2)]  # alone on an idle node: both cores
    sent.clear()
    reg.nodes["n0"].load = 16.0
    _busy(reg, [1], threads=1)  # a second trial starts beside it on the loaded node
    pool.tick(3.0, runs_waiting=False)
    assert sent == [("worker:w0", 1)] and reg.workers["w0"].threads == 1
