"""Failures on the real cluster: remote exceptions, interrupts, killed and stuck workers."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import cloudpickle
import pytest
from conftest import alive, wait_idle_workers

import raynb
from raynb.train.fit_run import execute_run
from raynb.train.torch import TorchTrainer

# Functions defined here travel by value, as a notebook's do.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

QUIET = raynb.RunConfig(verbose=0)
FOUR = raynb.ScalingConfig(num_workers=4)


def _ok():
    from raynb.train import get_context

    return get_context().get_world_size()


def _assert_usable(client):
    """The cluster is back to 4 idle workers and a normal run succeeds."""
    wait_idle_workers(client, 4)
    result, ret = execute_run(_ok, None, FOUR, QUIET)
    assert result.state == "FINISHED" and ret == 4


def _wait_refilled(client, before: set, lost: int, timeout: float = 30.0) -> dict:
    """Wait until ``lost`` dead workers are replaced up to the node's warm count.

    Extra workers forked for a bigger run earlier may still be there; the node
    only has to get back to its warm count (or keep the survivors, if more).
    Returns the status once there are also 4 idle workers.
    """
    warm_count = sum(n["num_workers"] for n in client.status()["nodes"])
    need = max(warm_count, len(before) - lost)
    deadline = time.monotonic() + timeout
    while len(client.status()["workers"]) < need:
        if time.monotonic() > deadline:
            raise AssertionError(f"dead workers were not replaced: {client.status()['workers']}")
        time.sleep(0.05)
    return wait_idle_workers(client, 4)


def _rank2_raises(config):
    import time

    from raynb.train import get_context

    if get_context().get_world_rank() == 2:
        with open(config["stamp"], "w") as f:
            f.write(repr(time.time()))
        raise ValueError("bad batch on rank two")  # FAILING LINE
    time.sleep(60)


def _rank2_raises_others_in_collective(config):
    import time

    import torch
    import torch.distributed as dist

    from raynb.train import get_context

    if get_context().get_world_rank() == 2:
        with open(config["stamp"], "w") as f:
            f.write(repr(time.time()))
        raise ValueError("bad batch on rank two")  # FAILING LINE 2
    dist.all_reduce(torch.ones(1))  # waits for rank 2 forever: must be killed


def _line_of(marker: str) -> int:
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if line.rstrip().endswith(marker) and "_line_of" not in line:
                return i
    raise AssertionError(marker)


@pytest.mark.parametrize("others", ["sleep", "collective"])
def test_remote_exception_is_run_error_with_traceback_and_rank(warm, tmp_path, others):
    fn, marker = {
        "sleep": (_rank2_raises, "# FAILING LINE"),
        "collective": (_rank2_raises_others_in_collective, "# FAILING LINE 2"),
    }[others]
    before = {w["pid"] for w in warm.status()["workers"]}
    stamp = tmp_path / "raised_at"
    with pytest.raises(raynb.RunError) as info:
        TorchTrainer(fn, train_loop_config={"stamp": str(stamp)}, scaling_config=FOUR, run_config=QUIET).fit()
    elapsed = time.time() - float(stamp.read_text())
    e = info.value
    # The other ranks were sleeping 60 s or waiting for rank 2 in all_reduce:
    # they must have been stopped (interrupted, or killed) soon after rank 2 raised.
    assert elapsed < 2.0, f"fit() returned {elapsed:.1f}s after rank 2 raised"
    assert e.rank == 2
    assert e.state == "FAILED"
    assert len(e.errors) == 1, e.errors  # the cancelled ranks are not reported as failures
    assert e.errors[0]["exc_type"] == "ValueError"
    assert "bad batch on rank two" in e.errors[0]["message"]
    tb = e.remote_traceback
    line = _line_of(marker)
    assert f'File "{__file__}", line {line}, in {fn.__name__}\n' in tb, tb
    assert 'raise ValueError("bad batch on rank two")' in tb
    assert tb.rstrip().endswith("ValueError: bad batch on rank two")
    assert "raynb/worker.py" not in tb  # raynb's own frames are dropped
    rendered = e._render_traceback_()
    assert isinstance(rendered, list) and all(isinstance(x, str) for x in rendered)
    assert rendered[0].startswith("RunError:") and "rank 2 raised ValueError" in rendered[0]
    assert any("remote traceback (rank 2" in x for x in rendered)
    assert any(x.endswith(f"line {line}, in {fn.__name__}") for x in rendered), rendered
    assert any('raise ValueError("bad batch on rank two")' in x for x in rendered)
    assert "rank 2" in str(e) and "bad batch on rank two" in str(e)
    assert e.result is not None and e.result.error is e
    err_txt = os.path.join(e.result.path, "error.txt")
    assert "bad batch on rank two" in open(err_txt).read()
    _wait_refilled(warm, before, 3 if others == "collective" else 0)
    _assert_usable(warm)


def _sleep_long():
    import time

    time.sleep(60)


def _interrupt_self_after(delay: float, fired: list) -> threading.Timer:
    def fire():
        fired.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Timer(delay, fire)
    t.start()
    return t


def test_interrupt_cancels_every_rank_and_cluster_stays_usable(warm):
    before = {w["pid"] for w in warm.status()["workers"]}
    fired: list = []
    timer = _interrupt_self_after(1.0, fired)
    try:
        with pytest.raises(KeyboardInterrupt):
            TorchTrainer(_sleep_long, scaling_config=FOUR, run_config=QUIET).fit()
        raised_at = time.monotonic()
    finally:
        timer.cancel()
    assert fired, "the interrupt fired after fit() had already returned"
    assert raised_at - fired[0] < 2.0, f"cancel took {raised_at - fired[0]:.1f}s"
    st = warm.status()
    assert st["runs"][-1]["state"] == "CANCELLED"
    # Sleeping ranks return on a cancel: nobody had to be killed.
    assert before <= {w["pid"] for w in st["workers"]}
    _assert_usable(warm)


def _rank1_sigkills_itself():
    import os
    import signal
    import time

    from raynb.train import get_context

    if get_context().get_world_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def test_sigkilled_worker_fails_run_and_is_replaced(warm):
    before = {w["pid"] for w in warm.status()["workers"]}
    t0 = time.monotonic()
    with pytest.raises(raynb.RunError) as info:
        execute_run(_rank1_sigkills_itself, None, FOUR, QUIET)
    elapsed = time.monotonic() - t0
    e = info.value
    assert elapsed < 3.0, f"the death took {elapsed:.1f}s to fail the run"
    assert e.rank == 1
    assert "rank 1" in str(e) and "SIGKILL" in str(e), str(e)
    assert e.errors[0]["signal"] == "SIGKILL"
    dead = e.errors[0]["pid"]
    assert not alive([dead])
    st = _wait_refilled(warm, before, 1)
    assert dead not in {w["pid"] for w in st["workers"]}
    _assert_usable(warm)


def test_worker_killed_from_outside_fails_run_and_is_replaced(warm):
    """`kill -9` of a rank's pid (as the OOM killer would) while the run sleeps."""
    from raynb.client import Client
    from raynb.cluster.connection_file import read_connection_file

    info = read_connection_file()
    before = {w["pid"] for w in warm.status()["workers"]}
    killed: list = []

    def killer():
        c = Client(info["address"], info["key"].encode(), info)  # its own socket
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                busy = {w["rank"]: w["pid"] for w in c.status()["workers"] if w["state"] == "busy"}
                if len(busy) == 4:
                    time.sleep(0.3)  # let the ranks get into the function
                    os.kill(busy[3], signal.SIGKILL)
                    killed.append(busy[3])
                    return
                time.sleep(0.05)
        finally:
            c.close()

    t = threading.Thread(target=killer)
    t.start()
    try:
        with pytest.raises(raynb.RunError) as info_:
            execute_run(_sleep_long, None, FOUR, QUIET)
    finally:
        t.join()
    assert killed, "the run never had 4 busy ranks"
    e = info_.value
    assert e.rank == 3 and e.errors[0]["pid"] == killed[0]
    assert "rank 3" in str(e) and "SIGKILL" in str(e), str(e)
    st = _wait_refilled(warm, before, 1)
    assert killed[0] not in {w["pid"] for w in st["workers"]}
    _assert_usable(warm)


def _stuck_in_collective(pid_dir):
    import os
    import time

    import torch
    import torch.distributed as dist

    from raynb.train import get_context

    rank = get_context().get_world_rank()
    with open(os.path.join(pid_dir, f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    if rank == 0:
        time.sleep(60)  # never joins the collective; a cancel interrupts this sleep
    dist.all_reduce(torch.ones(1))  # ranks 1..3 wait here for rank 0, in C++


def test_rank_stuck_in_collective_is_killed_and_replaced(warm, tmp_path):
    before = {w["pid"] for w in warm.status()["workers"]}
    fired: list = []
    timer = _interrupt_self_after(1.5, fired)
    try:
        with pytest.raises(KeyboardInterrupt):
            execute_run(_stuck_in_collective, str(tmp_path), FOUR, QUIET)
        raised_at = time.monotonic()
    finally:
        timer.cancel()
    assert fired
    assert raised_at - fired[0] < 3.0, f"cancel took {raised_at - fired[0]:.1f}s"
    pids = {r: int((tmp_path / f"rank{r}.pid").read_text()) for r in range(4)}
    deadline = time.monotonic() + 5
    while alive([pids[r] for r in (1, 2, 3)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive([pids[r] for r in (1, 2, 3)]), "ranks stuck in all_reduce were not killed"
    st = _wait_refilled(warm, before, 3)
    worker_pids = {w["pid"] for w in st["workers"]}
    assert pids[0] in worker_pids, "rank 0 returned on the cancel and should have been kept"
    assert not worker_pids & {pids[r] for r in (1, 2, 3)}
    assert st["runs"][-1]["state"] == "CANCELLED"
    _assert_usable(warm)
