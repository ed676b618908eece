"""A benchmark script run the way the tests run it, so that none can rot: ``--quick``, in a
clean environment (none of the session's ``RAYNB_HOME``, ``RAYNB_STORAGE_PATH`` or
``RAYNB_KEY``; ``TMPDIR`` the test's own directory, so what the script leaves behind can be
told from anyone else's), its one JSON object parsed, and nothing of it left: no process
started with a ``RAYNB_HOME`` under that directory, no ``raynb-*`` entry in it.

No timing is asserted on the result: the machines that run the tests are too noisy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


def processes_with_home_under(prefix: str) -> list[int]:
    """Pids of live processes whose ``RAYNB_HOME`` lies under ``prefix``."""
    pids = []
    for p in psutil.process_iter():
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if p.environ().get("RAYNB_HOME", "").startswith(prefix):
                pids.append(p.pid)
        except psutil.Error:
            continue
    return pids


def run_benchmark(
    script: str, tmp_path: Path | None, *args: str, quick: bool = True, timeout: float = 300
) -> dict:
    """Run ``benchmarks/<script>`` as the docs do, ``python -m benchmarks.<name>`` from the
    repository's root (with ``--quick`` unless ``quick`` is False, then ``args``), this
    checkout first on ``PYTHONPATH``, and return the JSON it printed.

    Raises:
        AssertionError: it exited non-zero (with the end of its stderr), or left a process
            or a ``raynb-*`` entry in ``tmp_path``.
        subprocess.TimeoutExpired: it ran past ``timeout`` seconds.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    if tmp_path is not None:
        env["TMPDIR"] = str(tmp_path)
    for k in ("RAYNB_HOME", "RAYNB_STORAGE_PATH", "RAYNB_KEY"):
        env.pop(k, None)
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{Path(script).stem}", *(["--quick"] if quick else []), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    if tmp_path is not None:
        assert processes_with_home_under(str(tmp_path)) == [], f"{script} left processes"
        left = [p.name for p in Path(tmp_path).iterdir() if p.name.startswith("raynb-")]
        assert left == [], f"{script} left {left} in its TMPDIR"
    return json.loads(proc.stdout)
