"""A benchmark's child process (Ray's side of a comparison) and everything in its session end
with it: on the child's timeout, and when the benchmark itself is sent SIGTERM (a `timeout`
around it), so no raylet or GCS outlives a benchmark."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
from benchmarks._common import run_child
print(run_child(["bash", "-c", "sleep 300 & sleep 300 & wait"], float(sys.argv[1])), flush=True)
"""


def _sleepers_of(pid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.info["cmdline"] == ["sleep", "300"] and os.getsid(p.pid) != os.getsid(0):
                if any(a.pid == pid for a in p.parents()) or p.ppid() == 1:
                    out.append(p)
        except (psutil.Error, OSError):
            pass
    return out


def _start(timeout_s: float) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(timeout_s)], env=env, stdout=subprocess.PIPE, text=True
    )


def _wait_for_sleepers(pid: int) -> list[psutil.Process]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = _sleepers_of(pid)
        if len(found) == 2:
            return found
        time.sleep(0.1)
    raise AssertionError("the child's two sleeps never started")


def test_a_child_past_its_timeout_is_ended_with_its_whole_session():
    bench = _start(timeout_s=2)
    sleepers = _wait_for_sleepers(bench.pid)
    out, _ = bench.communicate(timeout=60)
    assert out.strip() == "None"
    gone, alive = psutil.wait_procs(sleepers, timeout=5)
    assert not alive, alive


def test_sigterm_to_the_benchmark_ends_its_childs_session():
    bench = _start(timeout_s=300)
    sleepers = _wait_for_sleepers(bench.pid)
    bench.terminate()
    bench.communicate(timeout=60)
    gone, alive = psutil.wait_procs(sleepers, timeout=15)
    for p in alive:
        p.kill()
    assert not alive, f"left running after the benchmark's SIGTERM: {alive}"
