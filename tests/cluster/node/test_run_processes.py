"""Processes of a run and of the pool, on real clusters: what a training function starts
ends with its run (and on cancel and `raynb stop`), extra workers are retired once idle,
sys.stdout is a file to the function, a dead zygote is named (and replaced), a frozen
worker is shown as not responding, and a rank's torch threads follow how many ranks
share its node's cores.

Tests that kill a zygote, stop a cluster or need a short idle timeout use a private
cluster; the others use the session's warm cluster.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import cloudpickle
import psutil
import pytest
from conftest import alive, private_cluster, wait_idle_workers
from support.quick_benchmark import run_benchmark

import raynb
import raynb.client.connection
from raynb.client.status import format_status
from raynb.client.submit_and_follow import build_submission, follow_run, submit_run
from raynb.cluster.connection_file import read_connection_file
from raynb.cluster.head.pool import WorkerPool, idle_timeout_s
from raynb.cluster.head.registry import NodeInfo, Registry, WorkerInfo
from raynb.cluster.launch import start_cluster, stop_cluster
from raynb.cluster.procutil import ZYGOTE_MODULE
from raynb.cluster.protocol import messages as protocol_messages
from raynb.cluster.protocol.control import Client

# Functions defined here travel by value, as a notebook's do.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Pane:
    """A run view that keeps every event it is handed (what the pane would show)."""

    def __init__(self):
        self.events: list[dict] = []

    def handle(self, event: dict) -> None:
        self.events.append(event)

    def finish(self) -> None:
        pass

    def notes(self) -> list[str]:
        return [e["text"] for e in self.events if e.get("kind") == "note"]

    def output(self) -> str:
        return "".join(e["text"] for e in self.events if e.get("kind") == "output")


def _run(client, fn, config=None, n: int = 1, pane: Pane | None = None):
    """Submit ``fn`` on ``n`` ranks through ``client`` and follow it; returns the RunOutcome."""
    spec, payload = build_submission(
        fn, config, raynb.ScalingConfig(num_workers=n), raynb.RunConfig(verbose=0)
    )
    submit_run(client, spec, payload)
    return follow_run(client, spec["run_id"], pane or Pane(), all_ranks=True)


def _in_thread(fn, config=None, n: int = 1, pane: Pane | None = None) -> tuple[threading.Thread, dict]:
    """``_run`` on a connection of its own, in a thread; the dict gets "outcome" or "error"."""
    info = read_connection_file()
    out: dict = {}

    def go():
        c = Client(info["address"], info["key"].encode(), info)
        try:
            out["outcome"] = _run(c, fn, config, n, pane)
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            out["error"] = e
        finally:
            c.close()

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def _wait(cond, timeout: float, what: str, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(step)


def _kill_leftovers(procs) -> None:
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


@contextmanager
def _private_cluster(tmp_path, monkeypatch, workers: int, **env):
    """conftest.private_cluster, with ``env`` as keywords; yields (info, client)."""
    with private_cluster(tmp_path, monkeypatch, workers, env=env) as (info, client, _):
        yield info, client


# -- item 11: what a run starts ends with it ---------------------------------------------


def _start_children(config):
    """Start a subprocess, a fork, and a grandchild in a session of its own whose parent
    exits (it leaves the process group and is orphaned); returns their pids."""
    import os
    import subprocess
    import time

    popen = subprocess.Popen(["sleep", "600"])
    forked = os.fork()
    if forked == 0:
        time.sleep(600)
        os._exit(0)
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        grandchild = os.fork()
        if grandchild == 0:
            os.setsid()
            time.sleep(600)
            os._exit(0)
        os.write(w, str(grandchild).encode())
        os._exit(0)
    os.waitpid(middle, 0)
    pids = [popen.pid, forked, int(os.read(r, 64))]
    if config.get("pid_file"):
        with open(config["pid_file"] + ".tmp", "w") as f:
            f.write(" ".join(map(str, pids)))
        os.rename(config["pid_file"] + ".tmp", config["pid_file"])
        time.sleep(config.get("sleep", 0))
    return pids


def _gone(procs) -> bool:
    return not alive([p.pid for p in procs if p.is_running()])


def _wait_pid_file(path, out: dict, timeout: float = 30.0) -> list[psutil.Process]:
    _wait(lambda: os.path.exists(path) or "error" in out or "outcome" in out, timeout, "the children")
    assert os.path.exists(path), out
    return [psutil.Process(int(p)) for p in open(path).read().split()]


@pytest.mark.timeout(90)
def test_processes_a_run_starts_end_with_the_run_and_on_cancel(warm, tmp_path):
    """A Popen, a fork and an orphan in its own session, started by the function, ran on
    after the run (and after a cancel) for good."""
    outcome = _run(warm, _start_children, {})
    assert outcome.state == "FINISHED", outcome.record.get("error")
    procs = [psutil.Process(p) for p in outcome.value() if psutil.pid_exists(p)]
    try:
        _wait(lambda: _gone(procs), 3, f"the run's processes to end: {[p.pid for p in procs]}")
    finally:
        _kill_leftovers(procs)

    pid_file = str(tmp_path / "pids")
    t, out = _in_thread(_start_children, {"pid_file": pid_file, "sleep": 60})
    procs = _wait_pid_file(pid_file, out)
    try:
        warm.send(protocol_messages.CANCEL_RUN, {"run_id": _active_run_id(warm)})
        t.join(15)
        assert out["outcome"].state == "CANCELLED", out
        _wait(lambda: _gone(procs), 3, f"the cancelled run's processes to end: {[p.pid for p in procs]}")
    finally:
        _kill_leftovers(procs)


def _active_run_id(client) -> str:
    runs = [r for r in client.status()["runs"] if r["state"] == "RUNNING"]
    assert len(runs) == 1, runs
    return runs[0]["run_id"]


@pytest.mark.timeout(90)
def test_stop_ends_a_runs_processes_within_3s(tmp_path, monkeypatch):
    """`raynb stop` during a run whose function started processes took 15 s (it waited
    10 s for them, then killed only raynb's own) and left the `sleep` running."""
    with _private_cluster(tmp_path, monkeypatch, 1) as (info, client):
        pid_file = str(tmp_path / "pids")
        t, out = _in_thread(_start_children, {"pid_file": pid_file, "sleep": 600})
        procs = _wait_pid_file(pid_file, out)
        try:
            t0 = time.monotonic()
            assert stop_cluster()
            took = time.monotonic() - t0
            t.join(10)
            _wait(lambda: _gone(procs), 1, f"the run's processes to end: {[p.pid for p in procs]}")
            assert took < 3, f"raynb stop took {took:.1f}s"
        finally:
            _kill_leftovers(procs)


# -- item 12: extra workers are retired --------------------------------------------------


def _barrier(config):
    """Every rank of both runs waits until all of them are in their function."""
    import os
    import time

    from raynb.train import get_context

    ctx = get_context()
    open(os.path.join(config["dir"], f"{config['tag']}-{ctx.get_world_rank()}"), "w").close()
    deadline = time.monotonic() + 60
    while len(os.listdir(config["dir"])) < config["total"]:
        if time.monotonic() > deadline:
            raise TimeoutError("the other run never started")
        time.sleep(0.02)
    return os.getpid()


def _sum_of_ranks():
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    return t.item()


@pytest.mark.timeout(120)
def test_extra_workers_are_retired_after_the_idle_timeout(tmp_path, monkeypatch):
    """After two concurrent 4-rank runs on a 4-worker cluster, all 8 workers stayed
    (about 930 MB) for good."""
    with _private_cluster(tmp_path, monkeypatch, 4, RAYNB_WORKER_IDLE_TIMEOUT_S="1") as (info, client):
        barrier = tmp_path / "barrier"
        barrier.mkdir()
        runs = [_in_thread(_barrier, {"dir": str(barrier), "tag": tag, "total": 8}, 4) for tag in "ab"]
        for t, _ in runs:
            t.join(90)
        for _, out in runs:
            assert out["outcome"].state == "FINISHED", out
        pids = {p for _, out in runs for p in [out["outcome"].value()]}
        assert len(pids) == 2  # rank 0 of each run: two different workers
        seen = len(client.status()["workers"])
        assert seen in range(4, 9)  # 8, less those already retired
        st = _wait(
            lambda: (s := client.status()) and len(s["workers"]) == 4 and s,
            10,
            "the 4 extra workers to be retired",
        )
        assert all(w["state"] == "idle" for w in st["workers"])
        # The forked ones went, with their process group; the warm ones stay with theirs.
        assert sorted(w["worker_id"] for w in st["workers"]) == [f"local-w{i}" for i in range(1, 5)]
        assert _run(client, _sum_of_ranks, None, 4).value() == 10.0
        time.sleep(1.5)  # never below the warm count
        assert len(client.status()["workers"]) == 4
        assert "retiring worker" in (tmp_path / "home" / "logs" / "head.log").read_text()


def test_retire_picks_idle_extras_outside_groups_and_never_below_the_warm_count():
    """The pool's choice, on a registry of its own (no processes)."""
    reg = Registry()
    reg.add_node(NodeInfo("local", b"node:local:x", "h", "127.0.0.1", 1, num_workers=2, max_workers=8))
    for i in range(1, 6):
        reg.add_worker(WorkerInfo(f"local-w{i}", b"w", "local", 100 + i, "h", "127.0.0.1"))
    reg.groups[("local-w4", "local-w5")] = ("gloo", "k", None)
    reg.workers["local-w2"].run_id = "busy-run"
    sent = []
    pool = WorkerPool(reg, lambda *a: sent.append(a), lambda *a: None, idle_timeout_s=10)
    pool.tick(0.0, runs_waiting=False)
    assert sent == []  # nobody idle long enough
    pool.tick(10.0, runs_waiting=True)
    assert sent == []  # a run waits: it may need them
    # 5 workers, 2 warm: 3 to retire, never the busy w2. Chosen: those in no process group
    # first, the newest first (w3, w1), then the newest of the group w4, w5 (w5); of them,
    # those idle for the timeout. w4 is not taken for w3, which is not idle long enough.
    reg.workers["local-w3"].idle_since = 9.5
    pool.tick(10.0, runs_waiting=False)
    assert [(t, c["worker_id"]) for _, t, c in sent] == [
        ("retire_worker", "local-w1"),
        ("retire_worker", "local-w5"),
    ]
    assert set(reg.workers) == {"local-w2", "local-w3", "local-w4"}
    pool.tick(10.0, runs_waiting=False)  # w4 left its group with w5: the newest ungrouped
    assert [c["worker_id"] for _, _, c in sent][2:] == ["local-w4"]
    reg.workers["local-w2"].run_id = None
    pool.tick(100.0, runs_waiting=False)
    assert len(sent) == 3 and set(reg.workers) == {"local-w2", "local-w3"}  # the warm count


def test_idle_timeout_from_the_environment_or_the_flag(raynb_home, monkeypatch):
    monkeypatch.delenv("RAYNB_WORKER_IDLE_TIMEOUT_S", raising=False)
    assert idle_timeout_s() == 60.0
    monkeypatch.setenv("RAYNB_WORKER_IDLE_TIMEOUT_S", "2.5")
    assert idle_timeout_s() == 2.5 and idle_timeout_s(0) == 0.0
    monkeypatch.setenv("RAYNB_WORKER_IDLE_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="RAYNB_WORKER_IDLE_TIMEOUT_S must be a number of seconds"):
        idle_timeout_s()
    with pytest.raises(ValueError, match="idle timeout .* must be a number of seconds >= 0"):
        start_cluster(num_workers=1, idle_timeout_s=-1)


# -- item 13: sys.stdout, a dead zygote, a frozen worker ---------------------------------


def _closes_stdout():
    import sys

    print("before close")
    sys.stdout.close()
    assert sys.stdout.closed and not sys.stdout.readable() and sys.stdout.writable()
    try:
        print("after close")
    except ValueError as e:
        print(f"print raised {e}", file=sys.stderr)
    sys.stdout.close()  # twice, as on any file
    return "done"


def _prints():
    print("a later run prints")


def test_stdout_close_in_the_function_is_a_file_close(warm):
    """sys.stdout.close() raised AttributeError ('_RankStream' object has no attribute
    'close'), and must not silence later runs."""
    pane = Pane()
    outcome = _run(warm, _closes_stdout, None, 1, pane)
    assert outcome.state == "FINISHED", outcome.record.get("error")
    assert outcome.value() == "done"
    out = pane.output()
    assert "before close" in out and "print raised I/O operation on closed file" in out, out
    assert "after close" not in out
    pane = Pane()
    _run(warm, _prints, None, 1, pane)
    assert "a later run prints" in pane.output()


def _sleep(config):
    import time

    time.sleep(config.get("sleep", 60))
    return "slept"


def _zygote_of(info) -> psutil.Process:
    node = psutil.Process(info["pids"]["node"])
    return next(p for p in node.children() if ZYGOTE_MODULE in " ".join(p.cmdline()))


@pytest.mark.timeout(120)
def test_a_killed_zygote_is_named_and_replaced(tmp_path, monkeypatch):
    """A SIGKILLed zygote was reported as 'node agent exited with code 1'."""
    with _private_cluster(tmp_path, monkeypatch, 1) as (info, client):
        zygote = _zygote_of(info)
        t, out = _in_thread(_sleep, {"sleep": 60})
        _wait(lambda: any(w["state"] == "busy" for w in client.status()["workers"]), 20, "the run")
        zygote.kill()
        t.join(20)
        outcome = out["outcome"]
        assert outcome.state == "FAILED"
        named = f"the zygote (pid {zygote.pid}) died: killed by signal SIGKILL"
        messages = [e["message"] for e in outcome.record["errors"]]
        assert any(named in m for m in messages), messages
        assert named in (tmp_path / "home" / "logs" / "head.log").read_text()
        st = wait_idle_workers(client, 1, timeout=60)
        text = format_status(st)
        assert named in text and "a new zygote" in text, text
        assert st["nodes"][0]["pid"] == info["pids"]["node"]  # the node agent lived on
        assert st["nodes"][0]["zygote_pid"] != zygote.pid
        assert _run(client, _sleep, {"sleep": 0}).value() == "slept"


def _until_file(config):
    import os
    import time

    while not os.path.exists(config["file"]):
        time.sleep(0.05)
    return os.getpid()


def _worker_state(client, pid: int) -> dict:
    return next(w for w in client.status()["workers"] if w["pid"] == pid)


@pytest.mark.timeout(90)
def test_a_stopped_worker_is_shown_not_responding_and_back(warm, tmp_path):
    """A SIGSTOPped worker looked like any busy one, in `raynb status` and in the pane."""
    pane = Pane()
    stop_file = tmp_path / "stop"
    t, out = _in_thread(_until_file, {"file": str(stop_file)}, 1, pane)
    busy = _wait(lambda: [w for w in warm.status()["workers"] if w["state"] == "busy"], 20, "the run")
    pid = busy[0]["pid"]
    try:
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        w = _wait(lambda: (w := _worker_state(warm, pid))["not_responding"] and w, 5, "not responding")
        assert time.monotonic() - t0 < 5
        assert "stopped" in w["not_responding"]
        assert "NOT RESPONDING" in format_status(warm.status())
        _wait(lambda: any("is not responding" in n for n in pane.notes()), 3, "the pane's note")
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        _wait(lambda: _worker_state(warm, pid)["not_responding"] is None, 5, "responding again")
        _wait(lambda: any("responds again" in n for n in pane.notes()), 3, "the pane's note")
    finally:
        stop_file.touch()
        t.join(20)
    assert out["outcome"].state == "FINISHED" and out["outcome"].value() == pid


def _holds_the_gil(config):
    """A C call that keeps the GIL (poll(2) through ``PyDLL``) until the test writes to
    the FIFO ``config["fifo"]`` or ``config["seconds"]`` pass: no thread of the worker runs."""
    import ctypes
    import os

    class PollFd(ctypes.Structure):
        _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]

    # Opened for reading and writing: a FIFO with a writer of its own never reports a hang-up.
    fd = os.open(config["fifo"], os.O_RDWR | os.O_NONBLOCK)
    try:
        ctypes.PyDLL(None).poll(ctypes.byref(PollFd(fd, 1, 0)), 1, int(config["seconds"] * 1000))
    finally:
        os.close(fd)
    return "woke"


def _wake(fifo) -> None:
    """Let ``_holds_the_gil`` return (it is reading ``fifo``; none is: a no-op)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: no reader (it has not opened it, or it has returned)
        return
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)


@pytest.mark.timeout(90)
def test_a_worker_hung_holding_the_gil_is_shown_not_responding(warm, tmp_path):
    """Its process runs (not stopped), but no thread of it can: no heartbeat."""
    pane = Pane()
    fifo = tmp_path / "wake"
    os.mkfifo(fifo)
    t, out = _in_thread(_holds_the_gil, {"seconds": 9, "fifo": str(fifo)}, 1, pane)
    try:
        busy = _wait(lambda: [w for w in warm.status()["workers"] if w["state"] == "busy"], 20, "the run")
        w = _wait(
            lambda: (w := _worker_state(warm, busy[0]["pid"]))["not_responding"] and w, 8.5, "not responding"
        )
    finally:
        _wake(fifo)  # seen (or the test failed): the hang need not last its whole 9 s
    assert "heartbeat" in w["not_responding"]
    t.join(30)
    assert out["outcome"].value() == "woke"
    assert any("is not responding" in n for n in pane.notes()), pane.notes()
    _wait(lambda: _worker_state(warm, busy[0]["pid"])["not_responding"] is None, 5, "responding again")


# -- item 14: a rank's threads follow the ranks busy on its node -------------------------


def _threads_when_both_run(config):
    """While both runs are in their function, print (the worker takes the head's new
    share on the main thread then) and report torch's thread count."""
    import os
    import time

    import torch

    from raynb.train import report

    def both(stage):
        open(os.path.join(config["dir"], f"{stage}-{config['tag']}"), "w").close()
        while sum(n.startswith(stage) for n in os.listdir(config["dir"])) < 2:
            time.sleep(0.02)

    both("started")
    time.sleep(0.3)  # the head's tick sends the new share
    print("both run")  # the worker takes it on the main thread, at a line of output or a report
    report({"threads": torch.get_num_threads()})
    if config.get("own"):
        torch.set_num_threads(config["own"])
        report({"threads": torch.get_num_threads()})
    both("read")
    return torch.get_num_threads()


def _threads():
    import torch

    return torch.get_num_threads()


@pytest.mark.timeout(90)
def test_threads_are_the_nodes_cores_over_its_busy_ranks(warm, tmp_path):
    """Each rank took cpu_count // local_world_size of its own run: four one-rank trials on
    two cores ran eight threads (the README's Tune example: 72 s, 3 s with one thread)."""
    cores = len(os.sched_getaffinity(0))  # the session cluster's node is this machine
    assert _run(warm, _threads).value() == cores  # alone on the node: all its cores
    d = tmp_path / "both"
    d.mkdir()
    runs = [
        _in_thread(_threads_when_both_run, {"dir": str(d), "tag": tag, "own": own})
        for tag, own in (("a", None), ("b", 3))
    ]
    for t, _ in runs:
        t.join(60)
    a, b = (out["outcome"] for _, out in runs)
    share = max(1, cores // 2)
    assert a.reports[0]["threads"] == share, a.reports
    assert b.reports[0]["threads"] == share, b.reports
    assert b.reports[1]["threads"] == b.value() == 3  # the function's own set_num_threads wins
    assert _run(warm, _threads).value() == cores  # and does not leak into the next run
    assert warm.status()["nodes"][0]["cpus"] == cores  # what the node agent reported


def test_tune_digits_benchmark_quick_prints_json_and_cleans_up(tmp_path):
    """benchmarks/tune_digits.py (the README's Tune example, timed) runs and leaves nothing."""
    out = run_benchmark("tune_digits.py", tmp_path, timeout=240)
    assert out["trials"] == 4 and out["errors"] == 0 and out["fit_s"] > 0
    assert out["best_val_accuracy"] > 0.5
    assert sum(out["first_epoch_threads"].values()) == 4
    assert out["machine"]["cpus"] >= 1 and "load_avg_1m_at_end" in out["machine"]


def _leave_a_temp_dir(config):
    import os
    import tempfile

    d = tempfile.mkdtemp()  # never removed by the function: the node agent must
    open(os.path.join(d, "left.bin"), "wb").close()
    return d, os.getpid()


def test_a_workers_temp_files_go_with_it(tmp_path, monkeypatch):
    """A worker's TMPDIR is its own (in the system's temp dir, raynb-w-<agent pid>-*/<worker>):
    what a function leaves there (or could not clean up, being killed) is removed when the
    worker exits, and all of it when the cluster stops (each killed worker left its temp
    files in /tmp for good)."""
    import signal
    import tempfile

    with private_cluster(tmp_path, monkeypatch, 1) as (info, client, pids):
        outcome = _run(client, _leave_a_temp_dir)
        path, pid = outcome.value()
        agent_dir = os.path.dirname(os.path.dirname(path))
        assert os.path.basename(agent_dir).startswith(f"raynb-w-{info['pids']['node']}-"), path
        assert os.path.dirname(agent_dir) == tempfile.gettempdir() and len(path) < 70, path
        assert os.path.isfile(os.path.join(path, "left.bin")), path
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(path), "a killed worker's temp dir stayed"
        path2, _ = _run(client, _leave_a_temp_dir).value()  # its replacement has its own
        assert os.path.isdir(path2)
    assert not os.path.exists(path2) and not os.path.exists(agent_dir)


def _policies():
    import os as _os
    import subprocess as _sp
    import threading as _th

    seen = {}
    t = _th.Thread(target=lambda: seen.update(thread=_os.sched_getscheduler(0)))
    t.start()
    t.join()
    child = _sp.run(
        [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {"main": _os.sched_getscheduler(0), "thread": seen["thread"], "child": int(child.stdout)}


@functools.lru_cache(maxsize=None)
def _batch_settable() -> bool:
    """(asked once) Whether a child of this process can switch to SCHED_BATCH and this one runs under
    the normal policy (not so under `chrt -b`, or where the call is not permitted)."""
    if not hasattr(os, "SCHED_BATCH") or os.sched_getscheduler(0) != os.SCHED_OTHER:
        return False
    code = "import os; os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


@pytest.mark.skipif(
    not _batch_settable() or os.environ.get("RAYNB_WORKER_SCHED", "batch") != "batch",
    reason="SCHED_BATCH cannot be set here, or RAYNB_WORKER_SCHED turns it off",
)
def test_ranks_run_under_sched_batch_and_the_head_and_notebook_do_not(warm):
    """procutil.batch_scheduling: a rank waking up no longer preempts the head mid-way
    through sending a run's tasks (nor the notebook's kernel); what the rank starts, a
    thread or a process, inherits it."""
    from raynb.train.fit_run import execute_run

    _, policies = execute_run(_policies, None, raynb.ScalingConfig(num_workers=2), raynb.RunConfig(verbose=0))
    assert policies == {"main": os.SCHED_BATCH, "thread": os.SCHED_BATCH, "child": os.SCHED_BATCH}
    head = warm.info["pids"]["head"]
    assert os.sched_getscheduler(head) == os.SCHED_OTHER
    assert os.sched_getscheduler(warm.info["pids"]["node"]) == os.SCHED_OTHER
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


@pytest.mark.skipif(not _batch_settable(), reason="SCHED_BATCH cannot be set here")
@pytest.mark.parametrize(
    "setting, expected", [(None, "True 3"), ("other", "False 0"), (" Other ", "False 0"), ("fifo", "True 3")]
)
def test_batch_scheduling_is_on_unless_raynb_worker_sched_says_other(setting, expected):
    code = (
        "import os; from raynb.cluster.procutil import batch_scheduling; "
        "print(batch_scheduling(), os.sched_getscheduler(0))"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAYNB_WORKER_SCHED"}
    if setting:
        env["RAYNB_WORKER_SCHED"] = setting
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == expected.split(), out
    assert os.SCHED_BATCH == 3 and os.SCHED_OTHER == 0


def test_workers_temp_dirs_of_a_killed_agent_are_removed_and_a_live_ones_kept(tmp_path, monkeypatch):
    """A SIGKILLed node agent cannot remove its workers' temp dirs: the next agent's start
    (and the test session's end) removes those whose agent's pid is gone, no other."""
    import tempfile

    from raynb.cluster.node.host import WORKERS_TMP_PREFIX, remove_stale_workers_tmp

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f"{WORKERS_TMP_PREFIX}{gone.pid}-abc"
    live = tmp_path / f"{WORKERS_TMP_PREFIX}{os.getpid()}-def"
    other = tmp_path / "raynb-bench-home-x"
    for d in (dead, live, other):
        (d / "w0").mkdir(parents=True)
        (d / "w0" / "scratch.bin").write_bytes(b"x")
    assert remove_stale_workers_tmp() == [str(dead)]
    assert not dead.exists() and live.exists() and other.exists()


def test_a_bad_raynb_worker_sched_is_refused_by_start_and_node_naming_the_choices(tmp_path):
    env = {**os.environ, "RAYNB_WORKER_SCHED": "fifo", "RAYNB_HOME": str(tmp_path / "home")}
    try:
        for args in (["start", "--workers", "1"], ["node", "--address", "tcp://127.0.0.1:1"]):
            p = subprocess.run(
                [sys.executable, "-m", "raynb.cli", *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert p.returncode == 2, (args, p.stdout, p.stderr)
            assert (
                "RAYNB_WORKER_SCHED='fifo'" in p.stderr and "'batch'" in p.stderr and "'other'" in p.stderr
            ), p.stderr
        assert not (tmp_path / "home" / "cluster.json").exists()
    finally:  # were it ever started anyway, it is not left running
        subprocess.run(
            [sys.executable, "-m", "raynb.cli", "stop"],
            env={**env, "RAYNB_WORKER_SCHED": "batch"},
            capture_output=True,
            timeout=60,
        )


def _imports_late_module(config):
    import importlib

    return importlib.import_module(config["module"]).VALUE


def test_a_sys_path_directory_missing_at_a_workers_first_look_is_added_once_it_exists(
    warm, tmp_path, monkeypatch
):
    """The client sends a sys.path directory it saw once (shipping.sys_path_dirs); a worker
    that found it missing must look again at its next task, not remember the list as done."""
    from raynb.train.fit_run import execute_run

    late = tmp_path / "late_dir"
    late.mkdir()
    monkeypatch.syspath_prepend(str(late))
    from raynb.client.shipping import sys_path_dirs

    assert str(late) in sys_path_dirs()
    late.rmdir()
    ranks = raynb.ScalingConfig(num_workers=4)
    module = f"raynb_late_{os.getpid()}"
    with pytest.raises(raynb.RunError, match="No module named"):
        execute_run(_imports_late_module, {"module": module}, ranks, raynb.RunConfig(verbose=0))
    late.mkdir()
    (late / f"{module}.py").write_text("VALUE = 42\n")
    _, value = execute_run(_imports_late_module, {"module": module}, ranks, raynb.RunConfig(verbose=0))
    assert value == 42
