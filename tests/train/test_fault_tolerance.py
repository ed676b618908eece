"""Fault tolerance on the real cluster: dead workers, restarts from checkpoints, hangs.

Workers really die here (SIGKILL, SIGSEGV, os._exit) and are replaced from the
zygote; the epochs each attempt ran are read back from the run's reports, and a
counter kept in the checkpoint shows that no epoch was lost or counted twice.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import cloudpickle
import psutil
import pytest
from conftest import alive, import_paths, wait_idle_workers

import raynb
from raynb.train import FailureConfig, RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

# Functions defined here travel by value, as a notebook's do.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

FOUR = ScalingConfig(num_workers=4)


def _quiet(max_failures: int | None = None, **kw) -> RunConfig:
    fc = FailureConfig(max_failures) if max_failures is not None else None
    return RunConfig(verbose=0, failure_config=fc, **kw)


def _leftovers(run_path: str) -> list[str]:
    return [n for n in os.listdir(run_path) if n.startswith((".staging", ".tmp"))]


def _checkpoint_dirs(run_path: str) -> list[str]:
    return sorted(n for n in os.listdir(run_path) if n.startswith("checkpoint_"))


def _die(how: str):
    import ctypes
    import os
    import signal

    if how == "SIGKILL":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "SIGSEGV":
        ctypes.string_at(0)  # a real segmentation fault, in C
    elif how == "exit3":
        os._exit(3)
    raise AssertionError(f"still alive after {how}")


def _train_epochs(config):
    """One all_reduce per epoch, a checkpoint per epoch whose state.json holds the last
    epoch and how many epochs were trained in total. The rank ``victim`` dies at epoch
    ``kill_at`` once (a flag file), after its own report of the epoch before is out."""
    import json
    import os
    import tempfile
    import time

    import torch
    import torch.distributed as dist

    from raynb.train import Checkpoint, get_checkpoint, get_context, report

    ctx = get_context()
    rank = ctx.get_world_rank()
    state = {"epoch": -1, "count": 0}
    ck = get_checkpoint()
    if ck is not None:
        with ck.as_directory() as d:
            with open(os.path.join(d, "state.json")) as f:
                state = json.load(f)
    resumed_from = state["epoch"]
    for epoch in range(state["epoch"] + 1, config["epochs"]):
        test_fault_tolerance = torch.ones(1)
        dist.all_reduce(test_fault_tolerance)
        assert test_fault_tolerance.item() == ctx.get_world_size()
        if rank == config.get("victim") and epoch == config["kill_at"] and not os.path.exists(config["flag"]):
            open(config["flag"], "w").close()
            time.sleep(0.3)  # this rank's report of the epoch before reaches the head first
            _die(config["how"])
        time.sleep(config.get("sleep", 0))
        state = {"epoch": epoch, "count": state["count"] + 1}
        with tempfile.TemporaryDirectory() as d:
            name = "state.json" if rank == 0 else f"shard_{rank}.json"
            with open(os.path.join(d, name), "w") as f:
                json.dump(state, f)
            report(
                {"epoch": epoch, "resumed_from": resumed_from, "count": state["count"]},
                checkpoint=Checkpoint.from_directory(d),
            )


def _attempts(result) -> list[list[int]]:
    """The epochs rank 0 reported, grouped by attempt (by the checkpoint it resumed from)."""
    groups: list[list[int]] = []
    last = object()
    for row in result.metrics_dataframe.to_dict("records"):
        if row["resumed_from"] != last:
            groups.append([])
            last = row["resumed_from"]
        groups[-1].append(int(row["epoch"]))
    return groups


@pytest.mark.parametrize("how", ["SIGKILL", "SIGSEGV", "exit3"])
def test_worker_death_resumes_from_checkpoint_without_losing_an_epoch(warm, tmp_path, how, capsys):
    epochs, kill_at, victim = 5, 2, 2
    before = {w["pid"] for w in warm.status()["workers"]}
    result = TorchTrainer(
        _train_epochs,
        train_loop_config={
            "epochs": epochs,
            "kill_at": kill_at,
            "victim": victim,
            "how": how,
            "flag": str(tmp_path / "died"),
        },
        scaling_config=FOUR,
        run_config=RunConfig(verbose=1, failure_config=FailureConfig(max_failures=1)),
    ).fit()
    out = capsys.readouterr().out
    assert result.state == "FINISHED" and result.error is None
    # The failure is recorded, naming the rank and how it died.
    assert len(result.failures) == 1, result.failures
    f = result.failures[0]
    assert f["rank"] == victim
    word = {"SIGKILL": "SIGKILL", "SIGSEGV": "SIGSEGV", "exit3": "exited with code 3"}[how]
    assert f"rank {victim}" in f["message"] and word in f["message"], f
    if how == "exit3":
        assert f["exitcode"] == 3 and not f.get("signal")
    else:
        assert f["signal"] == how
    dead = f["pid"]
    assert dead not in before or not alive([dead])
    # The restart note, as the progress text shows it.
    cause = f"rank {victim} died, {how}" if how != "exit3" else f"rank {victim} exited with code 3"
    assert f"restart 1/1: {cause}; resuming from checkpoint_{kill_at - 1:06d}" in out, out
    live_notes = [x for x in out.splitlines() if "] note: " in x and "restart 1/1" in x]
    assert len(live_notes) == 1, out  # one note per restart, not another at placement
    # Attempt 1 ran epochs 0..kill_at (rank 0 reported kill_at; its checkpoint was never
    # committed, since the victim died before its report); attempt 2 resumed from the last
    # committed checkpoint (epoch kill_at - 1) and ran the rest: nothing lost, and the only
    # epoch run twice is the one after that checkpoint.
    assert _attempts(result) == [list(range(kill_at + 1)), list(range(kill_at, epochs))]
    resumed = result.metrics_dataframe["resumed_from"].tolist()
    assert resumed == [-1] * (kill_at + 1) + [kill_at - 1] * (epochs - kill_at)
    # The counter kept in the checkpoint: every epoch counted exactly once.
    with result.checkpoint.as_directory() as d:
        assert json.load(open(os.path.join(d, "state.json"))) == {"epoch": epochs - 1, "count": epochs}
        for r in range(1, 4):
            assert json.load(open(os.path.join(d, f"shard_{r}.json")))["count"] == epochs
    # Checkpoint numbering continues across the restart: one per committed epoch.
    assert _checkpoint_dirs(result.path) == [f"checkpoint_{i:06d}" for i in range(epochs)]
    for i in range(epochs):
        st = json.load(open(os.path.join(result.path, f"checkpoint_{i:06d}", "state.json")))
        assert st == {"epoch": i, "count": i + 1}
    assert _leftovers(result.path) == []
    assert result.metrics["epoch"] == epochs - 1
    st = wait_idle_workers(warm, 4)
    assert dead not in {w["pid"] for w in st["workers"]}


def _dies_right_after_its_report(config):
    """Two epochs of reports, each on ``config['delay']`` s of work; rank 1 reports epoch 0 (without
    a checkpoint: rank 0 writes it) and exits after a step's worth of Python, once.

    (A process killed within a millisecond of a report may still take it along: zmq's own
    I/O thread writes it to the connection. The epoch then runs again: at least once.)"""
    import os
    import tempfile
    import time

    import torch.distributed as dist

    from raynb.train import Checkpoint, get_checkpoint, get_context, report

    rank = get_context().get_world_rank()
    ck = get_checkpoint()
    start = 0 if ck is None else int(open(os.path.join(ck.path, "epoch")).read()) + 1
    for epoch in range(start, 2):
        time.sleep(config["delay"])
        if rank == 0:
            with tempfile.TemporaryDirectory() as d:
                open(os.path.join(d, "epoch"), "w").write(str(epoch))
                report({"epoch": epoch, "start": start}, checkpoint=Checkpoint.from_directory(d))
            dist.barrier()
        else:
            dist.barrier()  # rank 0's report, with its checkpoint, is out
            report({"epoch": epoch, "start": start})
            if not os.path.exists(config["flag"]):
                open(config["flag"], "w").close()
                _busy_for(0.01)  # a step's worth of Python, holding the GIL
                os._exit(3)


def _busy_for(seconds: float) -> None:
    import time

    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.parametrize("delay", [0.05, 0.2])
def test_a_rank_killed_a_moment_after_its_report_does_not_take_the_report_along(warm, tmp_path, delay):
    """The report that commits epoch 0's checkpoint is nearly rank 1's last act: the restart
    resumes from that checkpoint rather than training epoch 0 again (``report`` returns once
    its report is on the socket; the head fails a rank a moment after its node's word, so
    that what it sent before it died is read first)."""
    for i in range(3):  # a race, when the report waits in a queue the death empties
        result = TorchTrainer(
            _dies_right_after_its_report,
            train_loop_config={"delay": delay, "flag": str(tmp_path / f"died{i}")},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=_quiet(max_failures=1),
        ).fit()
        assert len(result.failures) == 1, result.failures
        rows = result.metrics_dataframe[["epoch", "start"]].values.tolist()
        # Epoch 0 once (rank 0 may have reported epoch 1 too before the death stopped it);
        # attempt 2 started at epoch 1, from epoch 0's checkpoint.
        assert rows.count([0, 0]) == 1 and rows[-1] == [1, 1], rows


def _dies_each_attempt(config):
    """Attempt n (counted by files in ``config['dir']``): rank deaths[n][0] dies its way."""
    import os

    import torch
    import torch.distributed as dist

    from raynb.train import get_context

    n = len(os.listdir(config["dir"]))
    dist.all_reduce(torch.ones(1))  # every rank counted the attempts before anyone dies
    rank = get_context().get_world_rank()
    if n < len(config["deaths"]) and rank == config["deaths"][n][0]:
        open(os.path.join(config["dir"], str(n)), "w").close()
        _die(config["deaths"][n][1])
    dist.all_reduce(torch.ones(1))


def test_max_failures_0_first_death_ends_the_run(warm, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(raynb.RunError) as info:
        TorchTrainer(
            _train_epochs,
            train_loop_config={
                "epochs": 4,
                "kill_at": 1,
                "victim": 1,
                "how": "SIGKILL",
                "flag": str(tmp_path / "died"),
            },
            scaling_config=FOUR,
            run_config=_quiet(max_failures=0),
        ).fit()
    elapsed = time.monotonic() - t0
    e = info.value
    assert elapsed < 5.0, f"{elapsed:.1f}s"
    assert e.state == "FAILED" and e.rank == 1
    assert e.errors[0]["signal"] == "SIGKILL"
    assert "rank 1" in str(e) and "SIGKILL" in str(e), str(e)
    r = e.result
    assert r.state == "FAILED" and len(r.failures) == 1
    # Not restarted: epochs 0 and 1 ran once each.
    assert r.metrics_dataframe["epoch"].tolist() == [0, 1]
    assert set(r.metrics_dataframe["resumed_from"]) == {-1}
    assert r.checkpoint.path.endswith("checkpoint_000000")
    assert "SIGKILL" in open(os.path.join(r.path, "error.txt")).read()
    wait_idle_workers(warm, 4)


def test_max_failures_2_third_death_names_all_three(warm, tmp_path):
    deaths = [(1, "SIGKILL"), (2, "exit3"), (3, "SIGSEGV")]
    (tmp_path / "attempts").mkdir()
    with pytest.raises(raynb.RunError) as info:
        TorchTrainer(
            _dies_each_attempt,
            train_loop_config={"dir": str(tmp_path / "attempts"), "deaths": deaths},
            scaling_config=FOUR,
            run_config=_quiet(max_failures=2),
        ).fit()
    e = info.value
    assert sorted(os.listdir(tmp_path / "attempts")) == ["0", "1", "2"]
    first3 = e.errors[:3]
    assert [x["rank"] for x in first3] == [1, 2, 3], e.errors
    assert first3[0]["signal"] == "SIGKILL"
    assert first3[1]["exitcode"] == 3
    assert first3[2]["signal"] == "SIGSEGV"
    text = str(e)
    for needle in ("rank 1", "SIGKILL", "rank 2", "exited with code 3", "rank 3", "SIGSEGV"):
        assert needle in text, text
    assert len(e.result.failures) == 3
    assert [x["rank"] for x in e.result.failures] == [1, 2, 3]
    wait_idle_workers(warm, 4)


def _rank1_raises_before_allreduce(config):
    import os
    import time

    import torch
    import torch.distributed as dist

    from raynb.train import get_context

    rank = get_context().get_world_rank()
    with open(os.path.join(config["dir"], f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    dist.all_reduce(torch.ones(1))
    if rank == 1:
        with open(os.path.join(config["dir"], "raised_at"), "w") as f:
            f.write(repr(time.time()))
        raise RuntimeError("rank one gives up")
    dist.all_reduce(torch.ones(1))  # the other ranks wait here for rank 1, in C++


def test_rank_raises_while_others_in_allreduce_ends_within_5s(warm, tmp_path):
    wall0 = time.time()
    with pytest.raises(raynb.RunError) as info:
        TorchTrainer(
            _rank1_raises_before_allreduce,
            train_loop_config={"dir": str(tmp_path)},
            scaling_config=FOUR,
            run_config=_quiet(),
        ).fit()
    ended = time.time()
    # Measured from the raise: the rendezvous of a new process group (earlier tests
    # killed workers) is not what this bounds.
    raised = float((tmp_path / "raised_at").read_text())
    entered = {r: round(os.path.getmtime(tmp_path / f"rank{r}.pid") - wall0, 2) for r in range(4)}
    assert ended - raised < 5.0, (
        f"the run ended {ended - raised:.1f}s after rank 1 raised "
        f"(ranks entered at {entered}; fit() took {ended - wall0:.1f}s)"
    )
    e = info.value
    assert e.rank == 1 and e.errors[0]["exc_type"] == "RuntimeError"
    pids = [int((tmp_path / f"rank{r}.pid").read_text()) for r in range(4)]
    st = wait_idle_workers(warm, 4)
    idle = {w["pid"] for w in st["workers"] if w["state"] == "idle"}
    # No rank stuck: each is idle again, or was killed (and replaced).
    for r, pid in enumerate(pids):
        assert pid in idle or not alive([pid]), f"rank {r} (pid {pid}) is neither idle nor gone"
    assert not [w for w in st["workers"] if w["state"] == "busy"]


def _raises_on_first_attempt(config):
    import json
    import os
    import tempfile

    import torch
    import torch.distributed as dist

    from raynb.train import Checkpoint, get_checkpoint, get_context, report

    rank = get_context().get_world_rank()
    ck = get_checkpoint()
    start = 0
    if ck is not None:
        with ck.as_directory() as d:
            start = json.load(open(os.path.join(d, "state.json")))["epoch"] + 1
    for epoch in range(start, 3):
        dist.all_reduce(torch.ones(1))
        if epoch == 1 and ck is None and rank == 3:
            raise ValueError("flaky data loader")
        with tempfile.TemporaryDirectory() as d:
            if rank == 0:
                json.dump({"epoch": epoch}, open(os.path.join(d, "state.json"), "w"))
            report({"epoch": epoch, "resumed": ck is not None}, checkpoint=Checkpoint.from_directory(d))


def test_exception_restarts_from_checkpoint(warm, capsys):
    result = TorchTrainer(
        _raises_on_first_attempt,
        scaling_config=FOUR,
        run_config=RunConfig(verbose=1, failure_config=FailureConfig(1)),
    ).fit()
    out = capsys.readouterr().out
    assert result.state == "FINISHED"
    assert len(result.failures) == 1
    f = result.failures[0]
    assert f["rank"] == 3 and f["exc_type"] == "ValueError" and "flaky data loader" in f["message"]
    assert (
        "restart 1/1: rank 3 raised ValueError: flaky data loader; resuming from checkpoint_000000" in out
    ), out
    rows = result.metrics_dataframe[["epoch", "resumed"]].to_dict("records")
    # Epoch 1's report was never made by rank 3: epoch 1 runs again, from checkpoint 0.
    assert [r["epoch"] for r in rows if not r["resumed"]] in ([0], [0, 1])
    assert [r["epoch"] for r in rows if r["resumed"]] == [1, 2]
    assert _checkpoint_dirs(result.path) == ["checkpoint_000000", "checkpoint_000001", "checkpoint_000002"]
    wait_idle_workers(warm, 4)


def _poison_copy_then_die(config):
    """Rank 1, at epoch ``kill_at`` (once: a flag file), is SIGKILLed by itself from inside
    report()'s copy of its checkpoint directory (12 files): when the third file is about
    to be copied. Resumes from get_checkpoint()."""
    import json
    import os
    import shutil
    import signal
    import tempfile

    import torch
    import torch.distributed as dist

    from raynb.train import Checkpoint, get_checkpoint, get_context, report

    rank = get_context().get_world_rank()
    resumed_from = -1
    ck = get_checkpoint()
    if ck is not None:
        with ck.as_directory() as d:
            resumed_from = json.load(open(os.path.join(d, "state.json")))["epoch"]
            assert json.load(open(os.path.join(d, "shard_1.json")))["epoch"] == resumed_from
    for epoch in range(resumed_from + 1, config["epochs"]):
        dist.all_reduce(torch.ones(1))
        dying = rank == 1 and epoch == config["kill_at"] and not os.path.exists(config["seen"])
        if dying:
            real_copyfile = shutil.copyfile
            copies = []

            def copyfile(src, dst, *a, **kw):
                copies.append(src)
                if len(copies) == 3:
                    tmp = os.path.dirname(dst)
                    with open(config["seen"], "w") as f:
                        json.dump(
                            {
                                "tmp": tmp,
                                "in_tmp": sorted(os.listdir(tmp)),
                                "stage": sorted(os.listdir(os.path.dirname(tmp))),
                            },
                            f,
                        )
                    os.kill(os.getpid(), signal.SIGKILL)
                return real_copyfile(src, dst, *a, **kw)

            shutil.copyfile = copyfile
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json" if rank == 0 else f"shard_{rank}.json"), "w") as f:
                json.dump({"epoch": epoch}, f)
            if dying:
                for i in range(11):
                    with open(os.path.join(d, f"big{i}.bin"), "wb") as f:
                        f.write(os.urandom(1 << 16))
            report({"epoch": epoch, "resumed_from": resumed_from}, checkpoint=Checkpoint.from_directory(d))


@pytest.mark.parametrize("max_failures", [0, 1])
def test_worker_killed_while_writing_checkpoint_keeps_previous_latest(warm, tmp_path, max_failures):
    seen = tmp_path / "seen.json"
    config = {"epochs": 4, "kill_at": 2, "seen": str(seen)}
    trainer = TorchTrainer(
        _poison_copy_then_die,
        train_loop_config=config,
        scaling_config=FOUR,
        run_config=_quiet(max_failures=max_failures),
    )
    if max_failures == 0:
        with pytest.raises(raynb.RunError) as info:
            trainer.fit()
        e = info.value
        assert e.rank == 1 and e.errors[0]["signal"] == "SIGKILL"
        r = e.result
    else:
        r = trainer.fit()
        assert r.state == "FINISHED" and len(r.failures) == 1 and r.failures[0]["signal"] == "SIGKILL"
    # It really died mid-copy: its temporary staging directory held 2 of the 12 files,
    # and no finished rank_1 directory existed.
    mid = json.loads(seen.read_text())
    assert os.path.basename(mid["tmp"]).startswith(".tmp_rank_1_")
    assert len(mid["in_tmp"]) == 2, mid
    assert "rank_1" not in mid["stage"]
    if max_failures == 0:
        # The checkpoint before stays the latest, whole, and loads.
        assert _checkpoint_dirs(r.path) == ["checkpoint_000000", "checkpoint_000001"]
        assert r.checkpoint.path == os.path.join(r.path, "checkpoint_000001")
        with r.checkpoint.as_directory() as d:
            assert sorted(os.listdir(d)) == ["shard_1.json", "shard_2.json", "shard_3.json", "state.json"]
            assert json.load(open(os.path.join(d, "state.json"))) == {"epoch": 1}
            assert json.load(open(os.path.join(d, "shard_1.json"))) == {"epoch": 1}
        again = raynb.train.Result.from_path(r.path)
        assert again.checkpoint.path == r.checkpoint.path and again.state == "FAILED"
    else:
        # The restart loaded it (every shard of epoch 1) and went on from epoch 2.
        df = r.metrics_dataframe
        assert df[df["resumed_from"] == 1]["epoch"].tolist() == [2, 3]
        assert df[df["resumed_from"] == -1]["epoch"].tolist() in ([0, 1], [0, 1, 2])
        assert _checkpoint_dirs(r.path) == [f"checkpoint_{i:06d}" for i in range(4)]
        with r.checkpoint.as_directory() as d:
            assert sorted(os.listdir(d)) == ["shard_1.json", "shard_2.json", "shard_3.json", "state.json"]
    assert _leftovers(r.path) == []
    wait_idle_workers(warm, 4)


def _rank3_skips_allreduce(config):
    import time

    import torch
    import torch.distributed as dist

    from raynb.train import get_context

    dist.all_reduce(torch.ones(1))  # the group works
    if get_context().get_world_rank() == 3:
        with open(config["stamp"], "w") as f:
            f.write(repr(time.time()))
        time.sleep(30)  # alive, but never joins the next collective
        return
    dist.all_reduce(torch.ones(1))


def test_collective_timeout_fails_the_run_instead_of_hanging(warm, tmp_path):
    from raynb.cluster.head.controller import CANCEL_GRACE_S

    timeout_s = 2
    stamp = tmp_path / "skipped_at"
    t0 = time.time()
    with pytest.raises(raynb.RunError) as info:
        TorchTrainer(
            _rank3_skips_allreduce,
            train_loop_config={"stamp": str(stamp)},
            scaling_config=ScalingConfig(num_workers=4, timeout_s=timeout_s),
            run_config=_quiet(),
        ).fit()
    ended = time.time()
    e = info.value
    assert stamp.exists(), f"the ranks never got past their first all_reduce: {e.errors}"
    waited = ended - float(stamp.read_text())
    # Ranks 0-2 give up after the collective timeout; rank 3 (sleeping) is then cancelled.
    assert waited < timeout_s + CANCEL_GRACE_S + 2.0, (
        f"the run failed {waited:.1f}s after rank 3 skipped the all_reduce (fit() took "
        f"{ended - t0:.1f}s): {e.errors}"
    )
    assert e.rank in (0, 1, 2), e.errors
    assert all(x.get("rank") != 3 for x in e.errors), e.errors
    assert any(
        "timed out" in (x.get("message") or "").lower() or "timeout" in (x.get("message") or "").lower()
        for x in e.errors
    ), e.errors
    wait_idle_workers(warm, 4)


# -- the head dies ------------------------------------------------------------------------

REPO = str(Path(__file__).resolve().parents[2])

CLIENT_RUN = """
import json, sys
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer
sys.path[:0] = {tests!r}
import test_fault_tolerance as t
TorchTrainer(t._train_epochs, train_loop_config={config!r}, scaling_config=ScalingConfig(num_workers=2),
             run_config=RunConfig(name="interrupted", verbose=0)).fit()
"""

LIST_AND_RESTORE = """
import json, os, raynb
from raynb.train.torch import TorchTrainer
df = raynb.runs()
row = df[df["name"] == "interrupted"].iloc[0]
listed = raynb.get_run("interrupted")
r = TorchTrainer.restore(row["path"]).fit()
with r.checkpoint.as_directory() as d:
    state = json.load(open(os.path.join(d, "state.json")))
print(json.dumps({"listed_state": row["state"], "listed_error": str(listed.error),
                  "state": r.state, "path": r.path, "ck_state": state,
                  "rows": r.metrics_dataframe[["epoch", "resumed_from"]].to_dict("records")}))
"""


LIST_AGAIN = """
import json, raynb
df = raynb.runs()
r = raynb.get_run("interrupted")
print(json.dumps({"names": df["name"].tolist(), "states": df["state"].tolist(),
                  "epochs": r.metrics_dataframe["epoch"].tolist(), "checkpoint": r.checkpoint.path,
                  "failures": len(r.failures)}))
"""


def _python_env(home) -> dict:
    return dict(
        os.environ,
        RAYNB_HOME=str(home / "home"),
        RAYNB_STORAGE_PATH=str(home / "results"),
        PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )


def test_head_sigkill_leaves_no_process_then_start_and_restore_work(tmp_path, monkeypatch):
    """An own cluster in its own RAYNB_HOME, its head SIGKILLed while a client's run is in
    the middle: within 10 s no head, node, zygote or worker of it runs; start_cluster then
    starts a fresh one, which lists the interrupted run as failed, and
    TorchTrainer.restore continues it from its latest checkpoint to the end. Then a clean
    stop and start: the new head lists the finished run and reads it back."""
    import subprocess

    from raynb.cluster.launch import cluster_pids, start_cluster, stop_cluster

    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RAYNB_STORAGE_PATH", str(tmp_path / "results"))
    env = _python_env(tmp_path)
    epochs = 12
    config = {"epochs": epochs, "kill_at": -1, "victim": None, "how": "", "flag": "", "sleep": 0.2}
    info, started = start_cluster(num_workers=2)
    assert started
    pids = cluster_pids(info)
    pids2: list[int] = []
    client = None
    try:
        cmds = {tuple(psutil.Process(p).cmdline()[1:3]) for p in pids}
        assert {
            ("-m", "raynb.cluster.head"),
            ("-m", "raynb.cluster.node.agent"),
            ("-m", "raynb.cluster.node.zygote"),
        } <= cmds, cmds
        assert len(pids) >= 5, pids  # head, node, zygote, 2 workers
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT_RUN.format(tests=import_paths(__file__), config=config)],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        run_dir = tmp_path / "results" / "interrupted"
        deadline = time.monotonic() + 30
        while not (run_dir / "checkpoint_000001").is_dir():
            assert client.poll() is None and time.monotonic() < deadline, "the run never checkpointed"
            time.sleep(0.05)
        os.kill(info["pids"]["head"], signal.SIGKILL)
        t0 = time.monotonic()
        while alive(pids) and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        assert not alive(pids), f"left after {time.monotonic() - t0:.1f}s: {alive(pids)}"
        client.kill()  # it waits on a head that is gone (it would give up by itself after 10 s)
        client.wait()
        info2, started2 = start_cluster(num_workers=2)
        assert started2 and info2["token"] != info["token"]
        pids2 = cluster_pids(info2)
        p = subprocess.run(
            [sys.executable, "-c", LIST_AND_RESTORE],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.returncode == 0, p.stderr[-3000:]
        got = json.loads(p.stdout.strip().splitlines()[-1])
        # Stopped and started again (same RAYNB_HOME and storage): the finished run is listed.
        assert stop_cluster()
        info3, started3 = start_cluster(num_workers=2)
        assert started3
        pids2 += cluster_pids(info3)
        p = subprocess.run(
            [sys.executable, "-c", LIST_AGAIN], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert p.returncode == 0, p.stderr[-3000:]
        again = json.loads(p.stdout.strip().splitlines()[-1])
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        for pid in alive(pids):  # only if the test failed: never leave them running
            os.kill(pid, signal.SIGKILL)
        stopped = stop_cluster()
    assert stopped
    deadline = time.monotonic() + 10
    while alive(pids2) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pids2)
    # The new head read the run back: failed, saying how to continue it.
    assert got["listed_state"] == "FAILED"
    assert "head stopped" in got["listed_error"] and "restore" in got["listed_error"], got["listed_error"]
    # Restored in place from its latest checkpoint: every epoch counted once.
    assert got["state"] == "FINISHED" and got["path"] == str(run_dir)
    assert got["ck_state"] == {"epoch": epochs - 1, "count": epochs}
    rows = got["rows"]
    resumed = max(r["resumed_from"] for r in rows)
    assert resumed >= 1
    before = [r["epoch"] for r in rows if r["resumed_from"] == -1]
    after = [r["epoch"] for r in rows if r["resumed_from"] == resumed]
    assert before == list(range(len(before))) and resumed in before
    assert after == list(range(resumed + 1, epochs))
    # The head started after a clean stop lists it, finished, and reads it back.
    assert again["names"] == ["interrupted"] and again["states"] == ["FINISHED"], again
    assert again["epochs"] == [r["epoch"] for r in rows]
    assert again["checkpoint"] == str(run_dir / f"checkpoint_{epochs - 1:06d}")
    assert again["failures"] == 1


def test_a_replacement_asked_for_before_the_killed_workers_exit_is_forked_once_it_exits(
    tmp_path, monkeypatch
):
    """The head asks for a killed rank's replacement right after its kill_worker, before the
    exit frees the node's room. The agent dropped that request (no room yet) while the head
    counted the fork as in flight: the node stayed a worker short, and a restarted run that
    needed it waited forever (seen in test_ray_engine). A real agent, zygote and workers,
    driven by a bare ROUTER socket standing in for the head."""
    import threading

    import zmq

    from raynb.cluster.node.agent import NodeAgent
    from raynb.cluster.protocol import messages

    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "home"))
    key = messages.new_key()
    ctx = zmq.Context()
    head = ctx.socket(zmq.ROUTER)
    port = head.bind_to_random_port("tcp://127.0.0.1")
    session = messages.Session(key, validate=True)
    agent = NodeAgent(f"tcp://127.0.0.1:{port}", key, num_workers=2, max_workers=2, node_id="t1")
    serving = threading.Thread(target=agent.serve, daemon=True)
    serving.start()
    node_identity, ready, exited = None, [], []

    def pump(until, timeout=90.0):
        nonlocal node_identity
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, (ready, exited)
            if not head.poll(200):
                continue
            msg = session.recv(head, router=True)
            if msg is None:
                continue
            if msg.msg_type == messages.NODE_REGISTER:
                node_identity = msg.identity
            if msg.identity == node_identity:
                session.send(
                    head, messages.PONG, {"time": time.time(), "registered": True}, identity=node_identity
                )
            if msg.msg_type == messages.WORKER_READY:
                ready.append(msg.content["worker_id"])
            elif msg.msg_type == messages.WORKER_EXITED:
                exited.append(msg.content["worker_id"])

    pids = []
    try:
        pump(lambda: len(ready) == 2)
        pids = list(agent.workers) + [agent.zygote.pid]
        victim = ready[0]
        session.send(
            head,
            messages.KILL_WORKER,
            {"worker_id": victim, "signal": int(signal.SIGKILL)},
            identity=node_identity,
        )
        session.send(head, messages.SPAWN_WORKERS, {"count": 1}, identity=node_identity)
        pump(lambda: victim in exited and len(ready) == 3)
        assert len(agent.workers) == 2 and agent.forks.wanted == 0 and agent.forks.in_flight == 0
        pids += list(agent.workers)
    finally:
        if node_identity is not None:
            session.send(head, messages.SHUTDOWN, {}, identity=node_identity)
        serving.join(15)
        head.close(0)
        ctx.term()
        for pid in alive(pids):  # only when the agent failed to end them
            os.kill(pid, signal.SIGKILL)
    assert not serving.is_alive()


def _rank1_error_is_slow_to_format(config):
    import os
    import time

    from raynb.train import get_context

    formatting = os.path.join(config["dir"], "formatting")

    class SlowToFormat(Exception):
        def __str__(self):
            if not os.path.exists(formatting):  # (str() is called more than once)
                open(formatting, "w").close()
                time.sleep(config["format_s"])  # the head's cancel (rank 0 failed) lands meanwhile
            return "rank 1's own error"

    rank = get_context().get_world_rank()
    with open(os.path.join(config["dir"], f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    if rank == 1:
        raise SlowToFormat()
    deadline = time.monotonic() + 30
    while not os.path.exists(formatting) and time.monotonic() < deadline:
        time.sleep(0.005)
    if config.get("die"):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    raise ValueError("rank 0 failed too")


def test_a_cancel_landing_while_a_ranks_error_is_formatted_keeps_its_end(warm, tmp_path):
    """Worker.execute: the SIGINT of the head's cancel, arriving while the worker formatted
    its rank's exception, raised a KeyboardInterrupt out of execute(), so its task_done was
    never sent: the head waited out the grace and killed a healthy worker (a peer's gloo
    error, then the dead peer's cancel, in a third of recovery.py's restarts)."""
    with pytest.raises(raynb.RunError) as info:
        TorchTrainer(
            _rank1_error_is_slow_to_format,
            train_loop_config={"dir": str(tmp_path), "format_s": 0.3},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=_quiet(),
        ).fit()
    errors = {e.get("rank"): e.get("message") for e in info.value.errors}
    assert errors == {0: "rank 0 failed too", 1: "rank 1's own error"}, info.value.errors
    pid = int((tmp_path / "rank1.pid").read_text())
    st = wait_idle_workers(warm, 4)
    assert pid in {w["pid"] for w in st["workers"] if w["state"] == "idle"}, "rank 1's worker was killed"


def test_a_rank_formatting_its_error_when_a_peer_dies_is_not_killed_as_blocked(warm, tmp_path):
    """Worker._still_running told the head "blocked" for a task past its function (its
    error being formatted), and the head kills a blocked rank at once when a peer died."""
    with pytest.raises(raynb.RunError) as info:
        TorchTrainer(
            _rank1_error_is_slow_to_format,
            train_loop_config={"dir": str(tmp_path), "format_s": 0.15, "die": True},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=_quiet(),
        ).fit()
    by_rank = {e.get("rank"): e for e in info.value.errors}
    assert by_rank[0].get("signal") == "SIGKILL", info.value.errors
    assert by_rank[1].get("message") == "rank 1's own error", info.value.errors
    pid = int((tmp_path / "rank1.pid").read_text())
    st = wait_idle_workers(warm, 4)
    assert pid in {w["pid"] for w in st["workers"] if w["state"] == "idle"}, "rank 1's worker was killed"
