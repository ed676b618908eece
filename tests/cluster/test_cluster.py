"""The cluster itself: scheduling, shipping code, the CLI, its lifecycle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import cloudpickle
import psutil
import pytest
from conftest import alive, wait_idle_workers

import raynb
from raynb.cluster.connection_file import read_connection_file
from raynb.cluster.launch import cluster_pids
from raynb.train.fit_run import execute_run
from raynb.train.torch import TorchTrainer

# Functions defined here travel by value, as a notebook's do.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

QUIET = raynb.RunConfig(verbose=0)


def _world():
    import os

    from raynb.train import get_context

    ctx = get_context()
    return ctx.get_world_size(), ctx.get_world_rank(), os.getpid()


def cli(*args, env=None, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "raynb", *args],
        capture_output=True,
        text=True,
        env=env or os.environ.copy(),
        timeout=timeout,
    )


# ------------------------------------------------------------------ scheduling
def test_more_workers_than_idle_forks_new_ones(warm):
    before = {w["pid"] for w in warm.status()["workers"]}
    assert len(before) >= 4
    n = len(before) + 2

    def fn():
        import os

        import torch
        import torch.distributed as dist

        t = torch.ones(1)
        dist.all_reduce(t)
        pids = [None] * dist.get_world_size()
        dist.all_gather_object(pids, os.getpid())
        return t.item(), pids

    result, (total, pids) = execute_run(fn, None, raynb.ScalingConfig(num_workers=n), QUIET)
    assert result.state == "FINISHED"
    assert total == n
    assert len(set(pids)) == n
    assert len(set(pids) - before) >= 2, "the run should have got freshly forked workers"
    wait_idle_workers(warm, 4)


def test_more_than_max_workers_fails_fast(warm):
    runs_before = len(warm.status()["runs"])
    t0 = time.monotonic()
    with pytest.raises(ValueError) as info:
        execute_run(_world, None, raynb.ScalingConfig(num_workers=1000), QUIET)
    assert time.monotonic() - t0 < 2.0
    msg = str(info.value)
    limit = sum(n["max_workers"] for n in warm.status()["nodes"])
    assert "1000" in msg and f"at most {limit}" in msg, msg
    with pytest.raises(ValueError, match=f"at most {limit}"):
        TorchTrainer(_world, scaling_config=raynb.ScalingConfig(num_workers=1000), run_config=QUIET).fit()
    assert len(warm.status()["runs"]) == runs_before, "a refused run must not be recorded"


@pytest.mark.parametrize("n", [0, -1, 2.5, "4", True, None])
def test_scaling_config_rejects_bad_num_workers(n):
    with pytest.raises(ValueError, match="num_workers"):
        raynb.ScalingConfig(num_workers=n)


# -------------------------------------------------------------- shipping code
def test_redefined_function_runs_in_its_new_form(warm):
    ns1 = {"__name__": "__main__"}
    exec(compile("def f():\n    return 1\n", "<cell-1>", "exec"), ns1)
    _, ret = execute_run(ns1["f"], None, raynb.ScalingConfig(num_workers=2), QUIET)
    assert ret == 1
    ns2 = {"__name__": "__main__"}
    exec(compile("def f():\n    return 2\n", "<cell-2>", "exec"), ns2)
    assert ns2["f"].__qualname__ == ns1["f"].__qualname__
    _, ret = execute_run(ns2["f"], None, raynb.ScalingConfig(num_workers=2), QUIET)
    assert ret == 2


def test_edited_local_module_is_reloaded_on_workers(warm, tmp_path, monkeypatch):
    modname = f"raynb_usermod_{os.getpid()}"
    src = tmp_path / f"{modname}.py"
    src.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def everyone_value():
        # Every rank must see the module's current value: rank 0 gathers them.
        def inner():
            import importlib

            import torch.distributed as dist

            mod = importlib.import_module(modname)
            out = [None] * dist.get_world_size()
            dist.all_gather_object(out, mod.VALUE)
            return out

        _, ret = execute_run(inner, None, raynb.ScalingConfig(num_workers=4), QUIET)
        return ret

    assert everyone_value() == [1, 1, 1, 1]
    st = os.stat(src)
    src.write_text("VALUE = 2\n")  # same size: only the mtime tells the edit apart
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
    assert everyone_value() == [2, 2, 2, 2]


def test_local_module_edited_during_a_run_is_reloaded_next_run(warm, tmp_path, monkeypatch):
    """An edit made while a run that imported the module is still going (the user
    edits the helper file during a long training) shows in the next run."""
    modname = f"raynb_usermod_live_{os.getpid()}"
    src = tmp_path / f"{modname}.py"
    src.write_text("VALUE = 1\n")
    old = os.stat(src)
    os.utime(src, ns=(old.st_atime_ns, old.st_mtime_ns - 10_000_000_000))  # written long ago
    monkeypatch.syspath_prepend(str(tmp_path))

    def run(config):
        import importlib

        import torch.distributed as dist

        mod = importlib.import_module(modname)
        seen = mod.VALUE
        dist.barrier()
        if config["edit"] and dist.get_rank() == 0:
            with open(config["path"], "w") as f:  # the edit, mid-run
                f.write("VALUE = 2\n")
        dist.barrier()
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, seen)
        return out

    four = raynb.ScalingConfig(num_workers=4)
    _, ret = execute_run(run, {"edit": True, "path": str(src)}, four, QUIET)
    assert ret == [1, 1, 1, 1]
    _, ret = execute_run(run, {"edit": False, "path": str(src)}, four, QUIET)
    assert ret == [2, 2, 2, 2]


@pytest.mark.parametrize("kind", ["open file", "lock", "generator", "lock via helper"])
def test_unpicklable_captured_variable_is_named_before_shipping(warm, tmp_path, kind):
    if kind == "open file":
        thing = open(tmp_path / "log.txt", "w")
    elif kind == "generator":
        thing = (i for i in range(3))
    else:
        thing = threading.Lock()

    def helper():
        return repr(thing)

    if kind == "lock via helper":

        def fn():
            return helper()
    else:

        def fn():
            return repr(thing)

    runs_before = len(warm.status()["runs"])
    try:
        with pytest.raises(raynb.UnpicklableError) as info:
            TorchTrainer(fn, scaling_config=raynb.ScalingConfig(num_workers=2), run_config=QUIET).fit()
    finally:
        if kind == "open file":
            thing.close()
    name = "helper -> thing" if kind == "lock via helper" else "thing"
    assert info.value.name == name
    assert f"'{name}'" in str(info.value)
    assert len(warm.status()["runs"]) == runs_before, "something was shipped"


# ------------------------------------------------------------------------- CLI
def test_cli_start_again_reports_the_running_cluster(warm):
    info = read_connection_file()
    p = cli("start")
    assert p.returncode == 0, p.stderr
    assert "already running" in p.stdout
    assert f"head pid {info['pids']['head']}" in p.stdout
    assert read_connection_file()["pids"] == info["pids"]
    assert len(warm.status()["nodes"]) == 1


def test_cli_status_shows_workers_and_rejected_messages(warm):
    st = warm.status()
    p = cli("status")
    assert p.returncode == 0, p.stderr
    assert "rejected messages: " in p.stdout
    for w in st["workers"]:
        assert w["worker_id"] in p.stdout and str(w["pid"]) in p.stdout
    assert f"pid {st['pid']}" in p.stdout


@pytest.mark.parametrize("bad", ["0", "-3", "1.5", "two"])
def test_cli_start_rejects_bad_worker_count(tmp_path, bad):
    env = dict(os.environ, RAYNB_HOME=str(tmp_path / "home"))
    p = cli("start", "--workers", bad, env=env, timeout=30)
    assert p.returncode != 0
    assert "--workers" in p.stderr, p.stderr
    assert read_connection_file(tmp_path / "home" / "cluster.json") is None


def test_cli_own_cluster_stale_file_start_status_stop(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, RAYNB_HOME=str(home))
    conn = home / "cluster.json"
    # A stale connection file: its head pid is a process that has exited.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = {
        "address": "tcp://127.0.0.1:9",
        "key": "0" * 64,
        "workers": 2,
        "pids": {"head": dead.pid, "node": dead.pid},
        "created": 0,
        "version": 1,
        "token": "x",
    }
    conn.write_text(json.dumps(stale))
    conn.chmod(0o600)  # as raynb writes it: one others may read is refused
    p = cli("status", env=env, timeout=30)
    assert p.returncode != 0 and "no raynb cluster is running" in p.stdout, (p.stdout, p.stderr)
    assert not conn.exists(), "a stale connection file must be removed"

    conn.write_text(json.dumps(stale))
    conn.chmod(0o600)  # as raynb writes it: one others may read is refused
    pids = []
    try:
        p = cli("start", "--workers", "2", env=env)
        assert p.returncode == 0, p.stderr
        assert "started" in p.stdout and "already running" not in p.stdout, p.stdout
        info = json.loads(conn.read_text())
        head = info["pids"]["head"]
        assert head != dead.pid and f"head pid {head}" in p.stdout
        assert psutil.Process(head).is_running()

        p = cli("start", "--workers", "2", env=env)
        assert p.returncode == 0 and "already running" in p.stdout, p.stdout
        assert f"head pid {head}" in p.stdout

        p = cli("status", env=env, timeout=30)
        assert p.returncode == 0, p.stderr
        assert "rejected messages: 0" in p.stdout
        assert p.stdout.count("idle") == 2, p.stdout

        pids = cluster_pids(info)
        # head, node agent, zygote and its 2 workers
        assert len(alive(pids)) >= 5, pids
        p = cli("stop", env=env, timeout=60)
        assert p.returncode == 0 and "stopped" in p.stdout, (p.stdout, p.stderr)
        deadline = time.monotonic() + 10
        while alive(pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pids), f"processes left after `raynb stop`: {alive(pids)}"
        assert not conn.exists()
        p = cli("stop", env=env, timeout=30)
        assert "no raynb cluster was running" in p.stdout
    finally:
        for pid in alive(pids):  # only this test's cluster, by pid
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass


def test_cli_stale_file_with_reused_pid_never_touches_that_process(tmp_path):
    """A stale connection file whose head pid now belongs to an unrelated process
    (pid reuse): status and stop must not take it for the head, nor kill it or
    its children."""
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, RAYNB_HOME=str(home))
    # An unrelated process (its command line even mentions raynb) with a child.
    victim = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', 'raynb-child']); "
            "time.sleep(60)",
            "raynb-victim",
        ]
    )
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(victim.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)
        child = psutil.Process(victim.pid).children()[0]
        stale = {
            "address": "tcp://127.0.0.1:9",
            "key": "0" * 64,
            "workers": 2,
            "pids": {"head": victim.pid, "node": victim.pid},
            "created": 0,
            "version": 1,
            "token": "x",
        }
        conn = home / "cluster.json"
        conn.write_text(json.dumps(stale))
        conn.chmod(0o600)  # as raynb writes it: one others may read is refused
        p = cli("status", env=env, timeout=30)
        assert p.returncode != 0 and "no raynb cluster is running" in p.stdout, (p.stdout, p.stderr)
        conn.write_text(json.dumps(stale))
        conn.chmod(0o600)  # as raynb writes it: one others may read is refused
        t0 = time.monotonic()
        p = cli("stop", env=env, timeout=60)
        assert time.monotonic() - t0 < 5, "stop waited for an unrelated process to exit"
        assert p.returncode == 0, p.stderr
        assert "no raynb cluster was running" in p.stdout, p.stdout
        assert not conn.exists()
        assert alive([victim.pid, child.pid]) == [victim.pid, child.pid], "stop killed an unrelated process"
    finally:
        for proc in psutil.Process(victim.pid).children(recursive=True):
            proc.kill()
        victim.kill()
        victim.wait()
