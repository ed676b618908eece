"""``benchmarks/profile_head.py --quick`` runs (a head alone under cProfile, simulated node
agents heartbeating into it) and prints its JSON, so the profiling tool cannot rot."""

from __future__ import annotations

from support.quick_benchmark import run_benchmark


def test_profile_head_quick_prints_the_heads_cpu_and_top_functions(tmp_path):
    out = run_benchmark("profile_head.py", tmp_path, "--top", "5", timeout=300)
    assert out["nodes"] == 20 and out["head_cpu_percent"] >= 0 and "main" in out["thread_cpu_percent"]
    assert len(out["top"]) == 5 and any("poll" in r["function"] for r in out["top"])
