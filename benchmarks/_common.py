"""What the benchmarks share: a private cluster (its own ``RAYNB_HOME`` and storage,
stopped and removed after), the machine's description, and the statistics each prints.

Imported by the scripts beside it (``from benchmarks._common import private_cluster``): each
runs from the repository's root as ``python -m benchmarks.NAME``.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def quantile(xs: list[float], q: float) -> float:
    """The q-quantile with linear interpolation (numpy's default)."""
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summary_ms(xs_s: list[float], digits: int = 2) -> dict:
    ms = [x * 1000 for x in xs_s]
    return {
        "median": round(statistics.median(ms), digits),
        "p90": round(quantile(ms, 0.9), digits),
        "min": round(min(ms), digits),
        "n": len(ms),
    }


def raynb_cli() -> list[str]:
    """The installed ``raynb`` command of this interpreter, else ``python -m raynb``."""
    exe = os.path.join(os.path.dirname(sys.executable), "raynb")
    return [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "raynb"]


def torchrun_cli() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "torchrun")
    return [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "torch.distributed.run"]


def _cluster_pids(home: str) -> list[int]:
    """The pids of the cluster that lives in ``home``: those its connection file names
    (and their descendants) and any other process started with that ``RAYNB_HOME``
    (covers a head interrupted before it wrote its connection file)."""
    import psutil

    pids: list[int] = []
    try:
        from raynb.cluster.connection_file import read_connection_file
        from raynb.cluster.launch import cluster_pids

        info = read_connection_file()
        pids += cluster_pids(info) if info else []
    except Exception:  # noqa: BLE001 - best effort: the scan below still finds them
        pass
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.environ().get("RAYNB_HOME") == home:
                pids.append(p.pid)
        except psutil.Error:
            continue
    return list(dict.fromkeys(pids))


def _kill_leftovers(pids: list[int], home: str) -> list[int]:
    """SIGKILL the cluster processes that outlived ``raynb stop``; returns who was left.

    A pid is only killed while it still runs with this benchmark's ``RAYNB_HOME``
    (never a reused pid that now belongs to someone else)."""
    import psutil

    left = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() == psutil.STATUS_ZOMBIE or p.environ().get("RAYNB_HOME") != home:
                continue
            left.append(pid)
            p.kill()
        except psutil.Error:
            pass
    return left


def stop_cluster(home: str) -> None:
    """``raynb stop``, then make sure nothing of the cluster in ``home`` is left."""
    from raynb.cluster.procutil import alive

    pids = _cluster_pids(home)
    try:
        subprocess.run(raynb_cli() + ["stop"], stdout=subprocess.DEVNULL, timeout=60)
    finally:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and alive(pids):
            time.sleep(0.1)
        left = _kill_leftovers(pids + [p for p in _cluster_pids(home) if p not in pids], home)
        if left:
            print(f"warning: killed raynb processes left after `raynb stop`: {left}", file=sys.stderr)


# -- the measurements -----------------------------------------------------------------
@contextlib.contextmanager
def private_cluster(base: str | None = None):
    """A temporary RAYNB_HOME and storage path for this benchmark's own cluster, in
    ``base`` (None: the system's temporary directory, ``$TMPDIR``); on exit (also on
    SIGTERM) the cluster started in it is stopped and both are removed.

    Yields (home, storage)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still run the cleanup below
    home = tempfile.mkdtemp(prefix="raynb-bench-home-", dir=base)
    storage = tempfile.mkdtemp(prefix="raynb-bench-results-", dir=base)
    os.environ.update(RAYNB_HOME=home, RAYNB_STORAGE_PATH=storage, RAYNB_PROGRESS="none")
    os.environ.pop("RAYNB_KEY", None)
    try:
        try:
            yield home, storage
        finally:
            stop_cluster(home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(storage, ignore_errors=True)


def inode_create_us(directory: str | None = None, files: int = 100) -> float:
    """CPU µs to create one empty file in a new directory under ``directory``: a run's
    files are new inodes, and on ext4 their cost depends on the directory's block group
    (13 µs to 1 ms on the VM measured, in the same file system), so the run figures
    are read with it."""
    with tempfile.TemporaryDirectory(prefix="raynb-bench-inode-", dir=directory) as d:
        t = time.thread_time()
        for i in range(files):
            os.close(os.open(os.path.join(d, str(i)), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return round((time.thread_time() - t) / files * 1e6, 1)


def machine_info(load_at_start: float, **extra) -> dict:
    """The machine a benchmark ran on, with the 1-minute load average at its start."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": _torch_version(),
        "platform": platform.platform(),
        "load_avg_1m_at_start": load_at_start,
        **extra,
    }


def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "?"


def run_child(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess | None:
    """``cmd`` in a session of its own, its output captured (text); None when it ran past
    ``timeout_s``, after ending it and every process of its session (a Ray child's raylet,
    GCS and workers outlive a child killed alone). The session is ended too when this
    script is interrupted or sent SIGTERM while it waits."""
    # The child is often this checkout's script run by path: `benchmarks` must import there too.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": path},
    )
    # A SIGTERM to this script (a `timeout` around it) must end the child's session too.
    with _sigterm_as_exit():
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _end_session(proc.pid)
            proc.communicate()
            return None
        except BaseException:
            _end_session(proc.pid)
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@contextlib.contextmanager
def _sigterm_as_exit():
    """SIGTERM raises SystemExit here (so `finally` and `except` blocks run), in the main thread."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _end_session(sid: int) -> None:
    """End every process of session ``sid`` (a child started with ``start_new_session``): a
    Ray child's raylet, GCS and workers stay in its session even when reparented."""
    import psutil

    def members():
        out = []
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if os.getsid(p.pid) == sid:
                    out.append(p)
        return out

    tree = members()
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(tree, timeout=10)
    for p in alive + members():
        with contextlib.suppress(psutil.Error):
            p.kill()


def ray_child(argv: list[str], timeout_s: float, what: str) -> dict:
    """Run ``argv + [tmp]`` (a script's Ray side, which prints its JSON last on stdout) with
    a private temporary folder, removed after; up to 3 tries while Ray's raylet misses its
    30 s registration (a loaded machine). Returns that JSON plus ``attempts``, or
    ``{"skipped": why}``."""
    why = None
    for attempt in range(3):
        tmp = tempfile.mkdtemp(prefix="rt-")  # short: Ray's socket paths must stay under 107 bytes
        try:
            p = run_child([*argv, tmp], timeout_s)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            time.sleep(2)  # a Ray agent that had not yet exited may write one more file there
            shutil.rmtree(tmp, ignore_errors=True)
        if p is None:
            return {"skipped": f"{what} did not finish within {timeout_s:.0f} s on this machine"}
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if p.returncode == 0 and lines:
            return {**json.loads(lines[-1]), "attempts": attempt + 1}
        why = p.stderr.strip().splitlines()[-1:]
        if "timed out during startup" not in str(why):
            break
    return {"skipped": f"{what} failed: {why}"}
