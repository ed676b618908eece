"""The head with many node agents: its per-message and per-tick work does not scan every node
or worker (a registry of its own), and with simulated node agents speaking the real signed
protocol (benchmarks/sim_nodes.py) it stays responsive (real cluster, real processes)."""

from __future__ import annotations

import pytest
from support.quick_benchmark import run_benchmark

from raynb.cluster.head.pool import WorkerPool
from raynb.cluster.head.registry import NodeInfo, Registry, WorkerInfo


class NoScan(dict):
    """A dict that fails a test when it is iterated while ``armed``."""

    armed = False

    def _check(self):
        if NoScan.armed:
            raise AssertionError("scanned every entry: a cost that grows with the cluster's size")

    def __iter__(self):
        self._check()
        return super().__iter__()

    def values(self):
        self._check()
        return super().values()

    def items(self):
        self._check()
        return super().items()


def _big_registry(nodes: int = 2000) -> Registry:
    reg = Registry()
    reg.nodes, reg.workers = NoScan(), NoScan()
    for i in range(nodes):
        reg.add_node(
            NodeInfo(
                f"n{i}", f"node:n{i}:x".encode(), "h", "10.0.0.1", 1, num_workers=2, max_workers=4, cpus=2
            )
        )
        for j in range(2):
            reg.add_worker(WorkerInfo(f"n{i}-w{j}", b"w", f"n{i}", 100 + j, "h", "10.0.0.1"))
    return reg


def test_per_message_registry_work_does_not_scan_the_cluster():
    reg = _big_registry()
    reg.nodes["n7"].last_seen = 0.0
    NoScan.armed = True
    try:
        reg.seen(b"node:n7:x")  # every heartbeat of every node
        assert reg.workers_on("n7") == 2 and reg.missing_workers("n7") == 0
        assert reg.thread_share("n7") == 2
        assert reg.node_of(b"node:n7:x") is reg.nodes.get("n7")
        assert reg.remove_worker("n7-w1").worker_id == "n7-w1" and reg.workers_on("n7") == 1
    finally:
        NoScan.armed = False
    assert reg.nodes["n7"].last_seen > 0.0
    assert [w.worker_id for w in reg.remove_node("n7")] == ["n7-w0"]
    assert reg.node_of(b"node:n7:x") is None and reg.workers_on("n7") == 0


def test_pool_looks_for_workers_to_retire_only_where_a_node_holds_extra_ones():
    reg = _big_registry(500)
    sent = []
    pool = WorkerPool(reg, lambda *a: sent.append(a), lambda *a: None, idle_timeout_s=1)
    pool.tick(0.0, runs_waiting=False)  # marks everyone idle (one pass over the workers)
    NoScan.armed = True
    try:
        assert pool.retirable(100.0) == []
    finally:
        NoScan.armed = False
    reg.add_worker(WorkerInfo("n3-w9", b"w", "n3", 109, "h", "10.0.0.1"))  # an extra on n3
    reg.workers["n3-w9"].idle_since = 0.0
    assert [w.worker_id for w in pool.retirable(100.0)] == ["n3-w9"]


def test_scale_nodes_quick_prints_json(tmp_path):
    out = run_benchmark("scale_nodes.py", tmp_path, timeout=400)
    assert [m["nodes"] for m in out["sizes"]] == [5, 20]
    for m in out["sizes"]:
        assert m["nodes_in_status"] == m["nodes"] + 1  # and the local node
        assert m["heartbeat_ms"]["n"] > 0 and m["heartbeat_ms"]["median"] > 0
        for k in ("ping_ms", "status_ms", "warm_rerun_ms"):
            assert 0 < m[k]["min"] <= m[k]["median"] <= m[k]["p90"], (k, m[k])
        assert isinstance(m["head_cpu_percent"], float) and m["head_rss_mb"] > 0
    bad = out["misbehaving"]
    assert bad["flood_heartbeats_sent"] > 0 and bad["nodes_in_status"] == bad["nodes_expected"] == 21
    assert bad["others_heartbeat_ms"]["n"] > 0  # the others were still answered
    (placed,) = out["placement"]  # 8 ranks over 12 simulated nodes of a simulated worker each
    assert placed["nodes"] == 12 and placed["place_ms"]["n"] == 2 and placed["place_ms"]["first"] > 0


@pytest.mark.timeout(900)
def test_head_stays_responsive_with_200_simulated_nodes(tmp_path):
    """A real client's warm re-run on the real local workers, with 200 simulated nodes
    heartbeating, within 2x its figure with none (medians of several runs)."""
    out = run_benchmark(
        "scale_nodes.py",
        tmp_path,
        *("--sizes", "200", "--runs", "15", "--pings", "20", "--window", "2"),
        *("--reply-every", "0", "--place-sizes", ""),  # every heartbeat answered: the heavier load
        quick=False,
        timeout=400,
    )
    m = out["sizes"][0]
    assert m["nodes_in_status"] == 201 and m["heartbeat_ms"]["n"] >= 200, m
    assert out["rerun_ratio_to_baseline"]["200"] < 2.0, out


def test_scale_ranks_quick_prints_json(tmp_path):
    out = run_benchmark("scale_ranks.py", tmp_path, timeout=300)
    assert [m["ranks"] for m in out["sizes"]] == [1, 2] and out["ratio_to_smallest"]["1"] == 1.0
    assert "torchrun" not in out and "ray_train" not in out  # full mode only: the quick one stays quick
    for m in out["sizes"]:
        w = m["warm_rerun_ms"]
        assert w["n"] == 3 and 0 < w["min"] <= w["median"] <= w["p90"], m
        assert m["new_group_ms"] > 0
