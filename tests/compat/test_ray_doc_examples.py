"""Ray's documentation examples (Ray Data's quick start, key concepts, transforming,
iterating, loading and saving; Ray Train's PyTorch start, data loading, checkpoints,
metrics, fault tolerance, experiment tracking), written as scripts in
tests/compat/ray_docs/ (each names its source page; downloads replaced by generated
data), run unchanged on raynb.

The scripts run one after another in one process (tests/compat/ray_docs/_run_scripts.py)
on the shared warm cluster: under ``raynb run`` by default; with their imports changed
too when ``RAYNB_RAY_EXAMPLES=all``. Every script must pass in each mode run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = Path(__file__).resolve().parent / "ray_docs"
SCRIPTS = sorted(str(p) for p in DOCS.glob("[a-z]*.py"))
FULL = os.environ.get("RAYNB_RAY_EXAMPLES", "") == "all"
MODES = ["raynb run"] + (["imports changed"] if FULL else [])

pytestmark = pytest.mark.ray_examples


def _run(mode: str) -> tuple[dict, str]:
    runner = str(DOCS / "_run_scripts.py")
    cmd = (
        [sys.executable, "-m", "raynb.cli", "run", runner]
        if mode == "raynb run"
        else [sys.executable, runner, "--rewrite"]
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    proc = subprocess.run(cmd + SCRIPTS, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RAYNB-SCRIPT "):
            r = json.loads(line[len("RAYNB-SCRIPT ") :])
            results[r["script"]] = r
    return results, proc.stderr[-3000:]


def test_every_doc_script_names_its_source():
    assert len(SCRIPTS) >= 12
    for path in SCRIPTS:
        head = Path(path).read_text()[:1500]
        assert "https://docs.ray.io/" in head and "ray-project/ray doc/source/" in head, path


@pytest.mark.parametrize("mode", MODES)
def test_ray_doc_scripts(cluster, mode):
    results, stderr = _run(mode)
    names = [Path(p).name for p in SCRIPTS]
    missing = [n for n in names if n not in results]
    failed = {n: r["reason"] for n, r in results.items() if r["status"] != "pass"}
    assert not missing and not failed, f"{mode}: failed {failed}, not run {missing}\n{stderr}"
