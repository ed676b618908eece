"""``raynb start`` / ``raynb node`` refuse more warm workers than the node may hold at once,
and ``raynb status`` answers at once while a start is under way (real CLI processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _env(tmp_path) -> dict:
    home, storage = tmp_path / "home", tmp_path / "storage"
    home.mkdir(mode=0o700, exist_ok=True)
    storage.mkdir(exist_ok=True)
    env = dict(os.environ, RAYNB_HOME=str(home), RAYNB_STORAGE_PATH=str(storage), PYTHONPATH=str(ROOT))
    env.pop("RAYNB_KEY", None)
    return env


def _cli(env, *args, timeout=60):
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "raynb.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc, time.monotonic() - t0


def test_start_refuses_more_workers_than_the_limit_at_once(tmp_path):
    env = _env(tmp_path)
    limit = max(16, 4 * (os.cpu_count() or 1))
    proc, took = _cli(env, "start", "--workers", str(limit * 2))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert f"limit of {limit} workers" in proc.stderr and "--max-workers" in proc.stderr, proc.stderr
    assert took < 20, took  # refused before any fork, not after the 120 s wait
    assert not (tmp_path / "home" / "cluster.json").exists()  # nothing was started
    # An explicit --max-workers names itself.
    proc, _ = _cli(env, "start", "--workers", "5", "--max-workers", "3")
    assert proc.returncode == 2 and "--max-workers 3" in proc.stderr, proc.stderr


def test_node_refuses_more_workers_than_the_limit(tmp_path):
    env = dict(_env(tmp_path), RAYNB_KEY="k" * 32)
    proc, took = _cli(
        env,
        "node",
        "--address",
        "tcp://127.0.0.1:9",
        "--workers",
        "9",
        "--max-workers",
        "4",
        "--reconnect",
        "0",
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "--workers 9" in proc.stderr and "--max-workers 4" in proc.stderr, proc.stderr
    assert took < 20, took


HOLD_LOCK = """
import sys, time
from raynb.cluster.launch.local import _start_lock
with _start_lock():
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
"""


def test_status_answers_at_once_while_a_start_holds_the_lock(tmp_path):
    env = _env(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, "60"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        proc, took = _cli(env, "status", timeout=30)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        assert f"a raynb cluster is starting (pid {holder.pid})" in proc.stdout, proc.stdout
        assert took < 15, took
    finally:
        holder.kill()
        holder.wait()
    proc, _ = _cli(env, "status")
    assert proc.returncode == 1 and "no raynb cluster is running" in proc.stdout, proc.stdout


def test_status_during_a_real_start_does_not_wait_for_it(tmp_path):
    env = _env(tmp_path)
    start = subprocess.Popen(
        [sys.executable, "-m", "raynb.cli", "start", "--workers", "2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lock = tmp_path / "home" / "start.lock"
        deadline = time.monotonic() + 30
        while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.02)
        proc, took = _cli(env, "status", timeout=60)
        still_starting = start.poll() is None
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        # Either it said the start is under way, or (a fast start) showed the cluster, but it
        # never waited on the start's lock: the start is still going, or it said "starting".
        assert "is starting" in proc.stdout or still_starting, (proc.stdout, took)
        assert start.wait(timeout=180) == 0, start.stderr.read()
    finally:
        if start.poll() is None:
            start.kill()
            start.wait()
        _cli(env, "stop")
