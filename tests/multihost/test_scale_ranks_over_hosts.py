"""``benchmarks/scale_ranks.py --hosts`` in its quick form, so the benchmark's multi-host side
(network namespaces, a node agent per host, SPREAD placement) cannot rot: two ranks spread over
two hosts, each host's node holding one of them, the trivial run's all-reduce right."""

from __future__ import annotations

from support.quick_benchmark import run_benchmark


def test_scale_ranks_over_two_hosts_quick_prints_json(tmp_path):
    out = run_benchmark(
        "scale_ranks.py", tmp_path, "--sizes", "2", "--runs", "2", "--hosts", "2", timeout=400
    )
    over = out["over_hosts"]
    assert "skipped" not in over, over
    [h2] = over["hosts"]
    assert h2["hosts"] == 2 and h2["workers_per_host"] == 1, h2
    [m] = h2["sizes"]
    assert m["ranks"] == 2, m
    assert m["n"] == 2 and 0 < m["min_ms"] <= m["median_ms"], m
    assert m["new_group_ms"] > 0, m
    assert out["settings"]["hosts"] == [2] and "ray_train" not in out and "torchrun" not in out
