"""The head's worker pool looks only at what changed on each tick (workers that became busy
or idle, nodes whose busy count changed), and still retires exactly the workers that a
walk over every worker on every tick retired, at the same ticks (a registry of its own)."""

from __future__ import annotations

import random

from raynb.cluster.head.pool import WorkerPool
from raynb.cluster.head.registry import NodeInfo, Registry, WorkerInfo


class NoScan(dict):
    """A dict that fails a test when it is iterated while ``armed``."""

    armed = False

    def _check(self):
        if NoScan.armed:
            raise AssertionError("scanned every entry: a tick's cost grew with the cluster's size")

    def __iter__(self):
        self._check()
        return super().__iter__()

    def values(self):
        self._check()
        return super().values()

    def items(self):
        self._check()
        return super().items()


def _registry(nodes: int, workers: int, warm: int, cpus: int = 4, scan_guard: bool = False) -> Registry:
    reg = Registry()
    if scan_guard:
        reg.nodes, reg.workers = NoScan(), NoScan()
    for i in range(nodes):
        reg.add_node(NodeInfo(f"n{i}", f"node:n{i}".encode(), "h", "10.0.0.1", 1, warm, 16, cpus=cpus))
        for j in range(workers):
            reg.add_worker(
                WorkerInfo(f"n{i}-w{j}", f"worker:n{i}-w{j}".encode(), f"n{i}", 1000 + j, "h", "ip")
            )
    return reg


def test_a_tick_with_nothing_changed_walks_no_node_and_no_worker():
    reg = _registry(1000, 4, warm=2, scan_guard=True)  # every node beyond its warm count
    sent = []
    pool = WorkerPool(reg, lambda *a: sent.append(a), lambda *a: None, idle_timeout_s=60)
    pool.tick(0.0, runs_waiting=False)  # the workers' joining: each marked idle, once
    assert all(w.idle_since == 0.0 for w in reg.workers.values())
    NoScan.armed = True
    try:
        for t in range(1, 50):
            pool.tick(t * 0.1, runs_waiting=False)  # nothing changed, nothing due: nothing walked
        reg.workers.get("n5-w0").run_id = "r"  # one rank starts on n5
        reg.workers.get("n5-w1").run_id = "r"
        reg.workers.get("n5-w0").threads = reg.workers.get("n5-w1").threads = 2
        pool._searched_at = reg.version  # (the search itself walks only nodes beyond warm)
        pool.tick(5.0, runs_waiting=False)
        reg.workers.get("n5-w1").run_id = None  # one of them ends: its peer gets all 4 cores
        pool._searched_at = reg.version
        pool.tick(5.1, runs_waiting=False)
    finally:
        NoScan.armed = False
    assert sent == [("worker:n5-w0".encode(), "set_threads", {"run_id": "r", "attempt": 0, "num_threads": 4})]
    assert reg.workers["n5-w1"].idle_since == 5.1 and reg.workers["n5-w0"].idle_since is None
    assert reg.workers["n5-w1"].threads is None


def test_extra_workers_are_retired_when_due_and_not_searched_for_in_between():
    reg = _registry(1, 5, warm=2)
    reg.groups[("n0-w0", "n0-w1")] = ("gloo", "k", None)  # the warm two's process group
    sent = []
    pool = WorkerPool(reg, lambda *a: sent.append(a), lambda *a: None, idle_timeout_s=10)
    pool.tick(0.0, runs_waiting=False)
    searches = []
    search = pool.retirable
    pool.retirable = lambda now: searches.append(now) or search(now)
    for t in (1.0, 5.0, 9.9):
        pool.tick(t, runs_waiting=False)
    assert searches == [] and sent == []  # nothing changed, none due before 10 s
    reg.workers["n0-w2"].run_id = "r"  # became busy: a change, so a search (which finds none due)
    pool.tick(9.95, runs_waiting=False)
    assert searches == [9.95] and sent == []
    pool.tick(10.0, runs_waiting=False)
    # Three beyond the warm two, w2 busy: the ungrouped newest first (w4, w3), then the
    # newest of the group (w1); never the busy one, never below the warm count.
    assert [c["worker_id"] for _, _, c in sent] == ["n0-w4", "n0-w3", "n0-w1"]
    assert set(reg.workers) == {"n0-w0", "n0-w2"}
    reg.add_worker(WorkerInfo("n0-w9", b"worker:n0-w9", "n0", 1009, "h", "ip"))  # forked for a run
    pool.tick(12.0, runs_waiting=False)  # idle from 12 s: due at 22
    reg.workers["n0-w2"].run_id = None  # idle from 15 s: due at 25, but not beyond the warm count
    pool.tick(15.0, runs_waiting=False)
    searches.clear()
    pool.tick(21.9, runs_waiting=False)
    assert searches == [] and len(sent) == 3
    pool.tick(22.0, runs_waiting=False)
    assert searches == [22.0] and sent[3][2]["worker_id"] == "n0-w9"
    pool.tick(40.0, runs_waiting=False)
    assert len(sent) == 4 and set(reg.workers) == {"n0-w0", "n0-w2"}


def test_a_worker_busy_again_before_its_timeout_starts_its_idle_time_over():
    reg = _registry(1, 3, warm=2)
    sent = []
    pool = WorkerPool(reg, lambda *a: sent.append(a), lambda *a: None, idle_timeout_s=10)
    pool.tick(0.0, runs_waiting=False)
    reg.workers["n0-w2"].run_id = "r"  # busy and idle again between two ticks
    reg.workers["n0-w2"].run_id = None
    pool.tick(8.0, runs_waiting=False)
    pool.tick(12.0, runs_waiting=False)
    assert sent == []  # idle since 8 s, not 0
    pool.tick(18.0, runs_waiting=False)
    assert [c["worker_id"] for _, _, c in sent] == ["n0-w2"]


class FullScanPool(WorkerPool):
    """The pool as it was: every worker walked on every tick, the search on every tick."""

    def tick(self, now, runs_waiting):
        self.registry.take_changes()
        busy = {}
        for w in self.registry.workers.values():
            if w.busy:
                busy.setdefault(w.node_id, []).append(w)
            elif w.idle_since is None:
                w.idle_since, w.threads = now, None
        for node_id, workers in busy.items():
            self._share_threads(node_id, workers)
        if not runs_waiting:
            for w in self.retirable(now):
                self.retire(w, now)


def _replay(pool_cls, seed: int) -> list:
    rnd = random.Random(seed)
    reg = _registry(6, 2, warm=2, cpus=4)
    sent = []
    pool = pool_cls(reg, lambda *a: sent.append((now, a[1], a[0], a[2])), lambda *a: None, idle_timeout_s=3)
    now, serial = 0.0, 0
    for _ in range(400):
        now += rnd.choice((0.005, 0.1, 0.5, 1.0, 2.5))
        ids = sorted(reg.workers)
        for wid in rnd.sample(ids, min(len(ids), rnd.randint(0, 3))):  # each flips at most once
            w = reg.workers[wid]
            if w.busy:
                w.run_id = None
            else:
                w.run_id, w.threads = f"r{serial}", 2
        r = rnd.random()
        if r < 0.15:  # a big run forked more on a node
            node = f"n{rnd.randrange(6)}"
            serial += 1
            reg.add_worker(WorkerInfo(f"{node}-x{serial}", b"w", node, serial, "h", "ip"))
        elif r < 0.2 and ids:  # a worker died
            reg.remove_worker(rnd.choice(ids))
        elif r < 0.3 and len(ids) >= 2:  # a run formed a process group
            reg.group_key(tuple(rnd.sample(ids, 2)), "gloo", None)
        pool.tick(now, runs_waiting=rnd.random() < 0.1)
    return sorted(sent, key=repr)  # what each tick sent, in any order within the tick


def test_retires_and_thread_shares_match_a_walk_over_every_worker_each_tick():
    for seed in range(20):
        want = _replay(FullScanPool, seed)
        assert {t for _, t, _, _ in want} == {"retire_worker", "set_threads"}
        assert _replay(WorkerPool, seed) == want, f"seed {seed}"
