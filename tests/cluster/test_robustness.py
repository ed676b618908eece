"""Robustness on the real cluster: lost messages, dead heads and nodes, stops during a
run, forks and threads inside workers, poisoned process groups, oversized results.

Each test is a regression test for a hang or a wrong result seen on a real cluster.
Tests that kill the head or a node agent use a small private cluster of their own.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

import cloudpickle
import pytest
from conftest import alive, private_cluster, wait_idle_workers

import raynb
import raynb.client
import raynb.client.connection
import raynb.client.output_relay
import raynb.client.submit_and_follow
from raynb.cluster.launch import start_cluster, stop_cluster
from raynb.train.fit_run import execute_run

# Functions and classes defined here travel by value, as a notebook's do.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

QUIET = raynb.RunConfig(verbose=0)


def _sc(n: int, **kw) -> raynb.ScalingConfig:
    return raynb.ScalingConfig(num_workers=n, **kw)


# -- on the shared cluster -------------------------------------------------------------


def _flood(config):
    from raynb.train import report

    pad = "x" * 2000  # so the events overflow the queues, not only fill the TCP buffers
    for i in range(config["n"]):
        print("line", i, pad)
        report({"i": i})
    return "done"


@pytest.mark.timeout(60)
def test_slow_client_loses_no_event_and_gets_run_done(warm, monkeypatch):
    """The head used to drop what it sent to a client whose queue was full (ZeroMQ's
    high-water mark): a client slower than its run's output (a notebook's stdout) lost
    lines and reports, and then the run_done it waited for: the cell hung forever."""
    lines = []
    stalled = []

    def slow_write(self, event):
        if not stalled:  # the notebook is busy for a moment while the run floods it
            stalled.append(1)
            time.sleep(1.5)
        lines.extend(event["text"].splitlines())

    monkeypatch.setattr(raynb.client.output_relay.OutputRelay, "write", slow_write)
    n = 4000
    result, ret = execute_run(_flood, {"n": n}, _sc(1), QUIET)
    assert ret == "done"
    assert lines == [f"line {i} {'x' * 2000}" for i in range(n)]
    assert len(result.metrics_dataframe) == n
    assert result.metrics["i"] == n - 1


def _fds_and_late_print(config):
    import os
    import threading
    import time

    from raynb.train import get_context

    rank = get_context().get_world_rank()
    with open(os.path.join(config["dir"], f"rank{rank}"), "w") as f:
        f.write(f"{os.getpid()} {os.readlink('/proc/self/fd/1')} {os.readlink('/proc/self/fd/2')}")

    def later():  # a thread of the user's that outlives the run
        time.sleep(0.3)
        print(config["marker"], rank)

    threading.Thread(target=later).start()


def test_worker_output_after_a_run_goes_to_its_log_not_a_socket(warm, tmp_path):
    """The worker's stdout fallback was the zygote's sys.__stdout__; the log stream that
    the zygote had put in sys.stdout was dropped, its file object collected, and fd 1
    closed and reused by the next socket (gloo, ZeroMQ). Output between runs, e.g. from
    a thread that outlived its run, was then written into that socket."""
    marker = f"late-line-{os.getpid()}-{time.time()}"
    execute_run(_fds_and_late_print, {"dir": str(tmp_path), "marker": marker}, _sc(4), QUIET)
    logs = []
    for rank in range(4):
        pid, fd1, fd2 = (tmp_path / f"rank{rank}").read_text().split()
        assert fd1 == fd2, (rank, fd1, fd2)
        assert os.path.basename(fd1).startswith("worker-") and fd1.endswith(".log"), fd1
        logs.append((fd1, rank))
    deadline = time.monotonic() + 5
    missing = logs
    while missing and time.monotonic() < deadline:
        time.sleep(0.1)
        missing = [(log, rank) for log, rank in logs if f"{marker} {rank}\n" not in open(log).read()]
    assert not missing, f"late output did not reach the workers' logs: {missing}"


class _PrintingDataset:
    """Defined in the 'notebook', shipped by value, used by forked DataLoader workers."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        import torch

        print("getitem", i)
        return torch.tensor([float(i)])


def _loader_with_forked_workers():
    import threading

    from torch.utils.data import DataLoader

    stop = []

    def chatter():  # another thread printing while the DataLoader forks its workers
        while not stop:
            print("chatter")

    t = threading.Thread(target=chatter, daemon=True)
    t.start()
    try:
        total = 0.0
        for _ in range(3):
            for batch in DataLoader(_PrintingDataset(), batch_size=4, num_workers=2, timeout=15):
                total += batch.sum().item()
        return total
    finally:
        stop.append(1)
        t.join()


@pytest.mark.timeout(60)
def test_dataloader_workers_forked_inside_a_worker_can_print(warm):
    """A DataLoader worker forked while another thread was printing inherited the
    worker's send lock held: its first print blocked forever (the DataLoader hung), and
    without the lock its output went into the parent's ZeroMQ socket, lost."""
    t0 = time.monotonic()
    result, ret = execute_run(_loader_with_forked_workers, None, _sc(1), QUIET)
    assert ret == 3 * sum(range(16))
    assert time.monotonic() - t0 < 10


def _poison_group_count_then_fail(config):
    import torch.distributed as dist

    from raynb.train import get_context

    if get_context().get_world_rank() == 0:
        dist.destroy_process_group()
        try:  # an init_process_group that fails (or is cancelled) in its rendezvous
            dist.init_process_group("gloo", init_method="bogus://nowhere", rank=0, world_size=2)
        except Exception:  # noqa: BLE001
            pass
        raise RuntimeError("rank 0 failed after a failed init_process_group")


def _sum_of_ranks():
    import torch
    import torch.distributed as dist

    from raynb.train import get_context

    t = torch.tensor([float(get_context().get_world_rank() + 1)])
    dist.all_reduce(t)
    return t.item()


@pytest.mark.timeout(60)
def test_failed_init_process_group_does_not_poison_the_next_group(warm):
    """init_process_group takes the default group's name from a counter before its
    rendezvous; after one interrupted by a cancel (or failed), that rank named its next
    group "1" while its peers used "0", and every later run with it hung in gloo."""
    with pytest.raises(raynb.RunError, match="failed after a failed init_process_group"):
        execute_run(_poison_group_count_then_fail, None, _sc(4), QUIET)
    wait_idle_workers(warm, 4)
    t0 = time.monotonic()
    # timeout_s: a regression fails here in seconds instead of hanging for 30 minutes
    _, ret = execute_run(_sum_of_ranks, None, _sc(4, timeout_s=10), QUIET)
    assert ret == 10.0
    assert time.monotonic() - t0 < 5


def _raises_keyboard_interrupt():
    raise KeyboardInterrupt("raised by the training code itself")


class _UnprintableError(Exception):
    def __str__(self):
        raise RuntimeError("no str")


def _raises_unprintable():
    raise _UnprintableError()


def test_user_raised_keyboard_interrupt_and_unprintable_exception_are_reported(warm):
    pids = {w["pid"] for w in warm.status()["workers"]}
    with pytest.raises(raynb.RunError) as info:
        execute_run(_raises_keyboard_interrupt, None, _sc(1), QUIET)
    e = info.value
    assert e.errors[0]["exc_type"] == "KeyboardInterrupt"
    assert e.errors[0]["message"] == "raised by the training code itself"
    assert "in _raises_keyboard_interrupt" in e.remote_traceback
    # An exception whose __str__ raises used to kill the worker ("exited with code 1").
    with pytest.raises(raynb.RunError) as info:
        execute_run(_raises_unprintable, None, _sc(1), QUIET)
    e = info.value
    assert e.errors[0]["exc_type"] == "_UnprintableError", e.errors
    assert "in _raises_unprintable" in e.remote_traceback
    assert pids <= {w["pid"] for w in wait_idle_workers(warm, 4)["workers"]}


def test_function_from_a_module_workers_cannot_import_says_so(warm, tmp_path):
    name = f"raynb_unimportable_{os.getpid()}"
    path = tmp_path / "elsewhere" / f"{name}.py"
    path.parent.mkdir()
    path.write_text("def train():\n    return 1\n")
    spec = importlib.util.spec_from_file_location(name, path)  # not on sys.path
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
        with pytest.raises(raynb.RunError) as info:
            execute_run(mod.train, None, _sc(1), QUIET)
    finally:
        del sys.modules[name]
    msg = info.value.errors[0]["message"]
    assert f"No module named '{name}'" in msg and "register_pickle_by_value" in msg, msg


# -- on private clusters (these kill the head or the node agent) -------------------------


@contextmanager
def _private_cluster(tmp_path, monkeypatch, workers: int):
    """conftest.private_cluster: yields (info, client, pids)."""
    with private_cluster(tmp_path, monkeypatch, workers) as found:
        yield found


def _sleep(config):
    import time

    time.sleep(config.get("sleep", 30))
    return "slept"


def _when_busy(info, n: int, action, done: list):
    """In a thread with its own socket: once ``n`` ranks are busy, run ``action``."""
    from raynb.client import Client

    def run():
        c = Client(info["address"], info["key"].encode(), info)
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if sum(w["state"] == "busy" for w in c.status()["workers"]) >= n:
                    time.sleep(0.2)  # into the function
                    done.append(time.monotonic())
                    action()
                    return
                time.sleep(0.05)
        finally:
            c.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.timeout(90)
def test_node_agent_death_and_stop_during_a_run_fail_the_run(tmp_path, monkeypatch):
    """Nothing reported the ranks of a dead node agent (its zygote kills them): the run
    and the cell waited forever. `raynb stop` during a run left the cell waiting too."""
    with _private_cluster(tmp_path, monkeypatch, 2) as (info, client, pids):
        import psutil

        node_pid = info["pids"]["node"]
        node_tree = [node_pid] + [p.pid for p in psutil.Process(node_pid).children(recursive=True)]
        killed: list = []
        t = _when_busy(info, 2, lambda: os.kill(node_pid, signal.SIGKILL), killed)
        with pytest.raises(raynb.RunError) as err:
            execute_run(_sleep, {}, _sc(2), QUIET)
        t.join()
        assert killed and time.monotonic() - killed[0] < 3
        msg = str(err.value)
        assert "node agent local" in msg and "SIGKILL" in msg and "rank" in msg, msg
        deadline = time.monotonic() + 5
        while alive(node_tree) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(node_tree), "the dead node's zygote and workers outlived it"
        # The head restarts its local node agent, which refills the warm workers.
        st = wait_idle_workers(client, 2, timeout=30)
        assert [n["pid"] for n in st["nodes"]] != [node_pid]
        _, ret = execute_run(_sum_of_ranks, None, _sc(2), QUIET)
        assert ret == 3.0

        stopped: list = []
        t = _when_busy(info, 2, stop_cluster, stopped)
        with pytest.raises(raynb.RunError, match="cluster was stopped"):
            execute_run(_sleep, {}, _sc(2), QUIET)
        t.join()
        assert time.monotonic() - stopped[0] < 5

        # A cluster started again (as from a terminal) is found by the next run at once,
        # not after a 10 s wait on the dead head.
        start_cluster(num_workers=1)
        t0 = time.monotonic()
        _, ret = execute_run(_sum_of_ranks, None, _sc(1), QUIET)
        assert ret == 1.0 and time.monotonic() - t0 < 5


def _big_return(config):
    return b"x" * config["size"]


@pytest.mark.timeout(90)
def test_head_killed_mid_run_fails_the_cell_and_cleans_up(tmp_path, monkeypatch):
    """A SIGKILLed head left the cell waiting forever for the run's end."""
    # A small message limit for this cluster: a too-big return value is checked too.
    monkeypatch.setenv("RAYNB_MAX_MESSAGE_BYTES", str(8 << 20))
    with _private_cluster(tmp_path, monkeypatch, 1) as (info, client, pids):
        # Over the limit, the head's socket dropped the worker's whole message: the
        # run's end was lost and the cell hung. Now it is a clear error.
        with pytest.raises(raynb.RunError, match="pickles to 16 MiB"):
            execute_run(_big_return, {"size": 16 << 20}, _sc(1), QUIET)

        monkeypatch.setattr(raynb.client.submit_and_follow, "PING_EVERY_S", 0.3)
        monkeypatch.setattr(raynb.client.submit_and_follow, "HEAD_SILENCE_S", 2.0)
        killed: list = []
        t = _when_busy(info, 1, lambda: os.kill(info["pids"]["head"], signal.SIGKILL), killed)
        with pytest.raises(raynb.ClusterError, match="lost contact with the raynb head"):
            execute_run(_sleep, {}, _sc(1), QUIET)
        t.join()
        assert time.monotonic() - killed[0] < 4
        deadline = killed[0] + 5
        while alive(pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pids), f"node, zygote or workers outlived the head: {alive(pids)}"
        # The next run finds the stale connection file and starts a fresh cluster.
        _, ret = execute_run(_sum_of_ranks, None, _sc(1), QUIET)
        assert ret == 1.0


def test_a_runs_thread_count_does_not_leak_into_the_next_run(warm):
    """torch.set_num_threads in one run's code must not stay in force for the next
    run on the same warm worker."""

    def shrink():
        import os

        import torch

        torch.set_num_threads(1)
        return os.getpid()

    def read():
        import os

        import torch

        return os.getpid(), torch.get_num_threads()

    cfg = raynb.ScalingConfig(num_workers=1)
    _, pid = execute_run(shrink, scaling_config=cfg, run_config=raynb.RunConfig(verbose=0))
    _, (pid2, threads) = execute_run(read, scaling_config=cfg, run_config=raynb.RunConfig(verbose=0))
    assert pid2 == pid, "the second run should reuse the warm single-rank group"
    assert threads == max(1, os.cpu_count() or 1)


def _oversized_reports(config):
    import torch

    from raynb.train import get_context, report

    report({"step": 1.0})
    if get_context().get_world_rank() == 0:
        report(
            {
                "step": 2.0,
                config["key"]: torch.ones(10_000_000) if config["key"] == "tensor" else "x" * (100 << 20),
            }
        )
    report({"step": 3.0})


@pytest.mark.parametrize(
    "key,what",
    [("tensor", "a Tensor of at least 40,000,000 bytes"), ("text", "a str of at least 104,857,600 bytes")],
)
def test_an_oversized_report_fails_on_its_rank_and_holds_no_other_run(warm, key, what):
    # A 100 MB report held the head's thread 10-25 s: the node agents took it for dead and
    # every run on the cluster failed (train/report_metrics.py).
    with pytest.raises(raynb.RunError) as info:
        execute_run(_oversized_reports, {"key": key}, _sc(2), QUIET)
    e = info.value
    assert e.errors[0]["rank"] == 0 and e.errors[0]["exc_type"] == "ReportTooLarge", e.errors
    assert f"the metrics are over the 1,048,576 bytes a report may carry ({key!r} is {what})" in str(e), str(
        e
    )
    assert "save arrays, tensors and long text in a checkpoint" in str(e)
    assert e.result.metrics["step"] == 1.0  # the report before it, recorded; nothing of it sent
    assert sum(len(v) for v in e.result.metrics.values() if isinstance(v, (str, list))) == 0


def _sets_umask_zero():
    import os

    os.umask(0)


def _reports_umask():
    import os

    from raynb.train import get_context, report

    mask = os.umask(0o077)
    os.umask(mask)
    report({"umask": mask, "pid": os.getpid(), "rank": get_context().get_world_rank()})


def test_a_runs_umask_does_not_leak_into_the_next_run(warm):
    # A task's os.umask(0) stayed with its warm worker: every later run's files there, another
    # notebook's too, were created world-writable. The cwd was already restored per task.
    before, _ = execute_run(_reports_umask, None, _sc(4), QUIET)
    execute_run(_sets_umask_zero, None, _sc(4), QUIET)
    after, _ = execute_run(_reports_umask, None, _sc(4), QUIET)
    assert after.metrics["umask"] == before.metrics["umask"] != 0, (before.metrics, after.metrics)


def _removes_its_run_directory(config):
    import os
    import shutil
    import tempfile
    import time

    import torch.distributed as dist

    from raynb.train import Checkpoint, get_context, report

    report({"step": 1})
    time.sleep(0.4)  # the head's tick has written the report files: the run's end only appends
    dist.barrier()
    if get_context().get_world_rank() == 0:
        shutil.rmtree(get_context().get_trial_dir())  # as `rm -r` in a terminal while it runs
    dist.barrier()
    if config["checkpoint"] and get_context().get_world_rank() == 0:
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "w.txt"), "w").write("state")
            report({"step": 2}, checkpoint=Checkpoint.from_directory(d))
    else:
        report({"step": 2})


@pytest.mark.parametrize("checkpoint", [False, True])
def test_a_run_whose_directory_is_removed_fails_and_it_is_not_made_again(warm, checkpoint):
    # Without checkpoints the run ended FINISHED over a directory that did not exist; with them,
    # staging one made the directory again, with the umask's mode (0755), holding only the
    # later checkpoints while best_checkpoints listed them all.
    with pytest.raises(raynb.RunError) as info:
        execute_run(_removes_its_run_directory, {"checkpoint": checkpoint}, _sc(2), QUIET)
    e = info.value
    path = e.result.path
    if checkpoint:
        assert e.errors[0]["rank"] == 0 and e.errors[0]["exc_type"] == "FileNotFoundError", e.errors
        assert f"the run directory {path} is gone (removed while the run ran?)" in str(e), str(e)
    else:
        assert f"the run directory {path} was removed while the run ran" in str(e), str(e)
    assert not os.path.exists(path)


def _sleeps_reporting(config):
    from raynb.train import report

    for i in range(600):
        report({"i": i})
        time.sleep(0.05)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_before_the_run_is_followed_cancels_it(warm, monkeypatch, exc):
    # Between the head's acceptance and following the run, the cell builds its progress
    # widgets (tens of ms): a Ctrl-C or a script's SIGTERM there left the run going on for
    # its whole half minute, followed by nobody.
    from raynb.client import views
    from raynb.client.runs import fetch_record
    from raynb.cluster.protocol import messages
    from raynb.errors import RunInterrupted

    class Interrupted:
        def __init__(self, *a, **k):
            pass

        def display(self):
            raise exc(143) if exc is SystemExit else exc()

    monkeypatch.setattr(views, "run_view", Interrupted)
    name = f"unfollowed_{exc.__name__}_{os.getpid()}"
    with pytest.raises(exc) as info:
        execute_run(_sleeps_reporting, {}, _sc(2), raynb.RunConfig(name=name, verbose=0))
    if exc is KeyboardInterrupt:
        assert isinstance(info.value, RunInterrupted) and "it was cancelled" in str(info.value), info.value
        assert info.value.run_path and info.value.run_path.endswith(name)  # %%ray_train binds its Result
    deadline = time.monotonic() + 10
    while (record := fetch_record(messages.GET_RUN, name))["state"] not in (
        "CANCELLED",
        "FINISHED",
        "FAILED",
    ) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert record["state"] == "CANCELLED", record["state"]
    assert record.get("num_reports", 0) < 100, record.get("num_reports")
    wait_idle_workers(warm, 4, timeout=10)


class _SigintInDealloc:
    """Sends this process SIGINT while it is being freed: Python runs the handler inside
    the deallocator and discards its KeyboardInterrupt, as it does when the signal lands
    in pyzmq's Frame.__dealloc__ (which checks for signals)."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)


class _SwallowingView:
    """A run's or a Tune experiment's view that, at the first report (or the event ``at``
    picks), takes a Ctrl-C the way pyzmq can lose one: noted by the handler, never raised
    to the caller."""

    def __init__(self, at=lambda event: event.get("kind") == "report"):
        self.at = at
        self.swallowed = []
        self.progress = self  # Tune's driver feeds progress; everything but add_result is ignored

    def __getattr__(self, name):
        return lambda *a, **k: None

    def _report(self):
        if not self.swallowed:
            self.swallowed.append(time.monotonic())
            _SigintInDealloc()  # made and freed here

    def handle(self, event):
        if self.at(event):
            self._report()

    def add_result(self, *a, **k):
        self._report()


@pytest.mark.parametrize("where", ["fit", "tune"])
def test_a_ctrl_c_swallowed_in_a_deallocator_still_cancels(warm, monkeypatch, where):
    # test_restore_continues_a_cancelled_run saw it in CI: the Ctrl-C landed in pyzmq's
    # Frame.__dealloc__, was printed as "Exception ignored" and the run went on to its end.
    from raynb import tune
    from raynb.client import views
    from raynb.client.runs import fetch_record
    from raynb.cluster.protocol import messages
    from raynb.errors import RunInterrupted

    view = _SwallowingView()
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    monkeypatch.setattr(views, "run_view" if where == "fit" else "tune_view", lambda *a, **k: view)
    name = f"swallowed_{where}_{os.getpid()}_{time.monotonic_ns()}"
    if where == "fit":
        with pytest.raises(RunInterrupted, match="cancelled on every rank"):
            execute_run(_sleeps_reporting, {}, _sc(2), raynb.RunConfig(name=name, verbose=0))
        assert fetch_record(messages.GET_RUN, name)["state"] == "CANCELLED"
    else:
        grid = tune.Tuner(
            _sleeps_reporting,
            param_space={"x": tune.grid_search([1])},
            tune_config=tune.TuneConfig(metric="i", mode="max"),
            run_config=raynb.RunConfig(name=name, verbose=0),
        ).fit()
        assert grid.interrupted and [r.metrics.get("i", 0) < 100 for r in grid] == [True], grid
    # Raised again within interrupts.CHECK_S of the swallowed one, not at the run's end (30 s).
    assert view.swallowed and time.monotonic() - view.swallowed[0] < 10
    assert any(isinstance(u.exc_value, KeyboardInterrupt) for u in unraisable), unraisable
    wait_idle_workers(warm, 4, timeout=10)


def _reports_once(config):
    from raynb.train import report

    report({"i": 0})


def test_a_ctrl_c_swallowed_as_the_run_ends_loses_no_message(warm, monkeypatch):
    # A Ctrl-C noted while the run's last message was received: raised once that message
    # was handled, so the run_done still in hand is read (it was dropped, and the client
    # then waited 5 s for a cancel the head never confirms for an ended run: ClusterError).
    from raynb.client import views
    from raynb.errors import RunInterrupted

    view = _SwallowingView(at=lambda e: e.get("kind") == "state" and e.get("state") == "FINISHED")
    monkeypatch.setattr(sys, "unraisablehook", lambda u: None)
    monkeypatch.setattr(views, "run_view", lambda *a, **k: view)
    name = f"swallowed_end_{os.getpid()}_{time.monotonic_ns()}"
    started = time.monotonic()
    with pytest.raises(RunInterrupted, match=r"had ended \(FINISHED\) when it was interrupted"):
        execute_run(_reports_once, {}, _sc(2), raynb.RunConfig(name=name, verbose=0))
    assert view.swallowed and time.monotonic() - started < 4
