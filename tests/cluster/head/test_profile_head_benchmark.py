"""``benchmarks/profile_head.py --quick`` runs (a head alone under cProfile, simulated node
agents heartbeating into it) and prints its JSON, so the profiling tool cannot rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_profile_head_quick_prints_the_heads_cpu_and_top_functions(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT))
    for k in ("RAYNB_HOME", "RAYNB_STORAGE_PATH", "RAYNB_KEY"):
        env.pop(k, None)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "profile_head.py"), "--quick", "--top", "5"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["nodes"] == 20 and out["head_cpu_percent"] >= 0 and "main" in out["thread_cpu_percent"]
    assert len(out["top"]) == 5 and any("poll" in r["function"] for r in out["top"])
    assert not list(tmp_path.glob("raynb-profile-head-*")), "the benchmark left its directory"
