"""Runs outlive their client: other processes list, read, attach to and restore them.

Second clients are real new Python processes (subprocesses with the same
RAYNB_HOME); a client is SIGKILLed mid-run; run directories are read back with no
cluster, restored in place, and refused (untouched) when corrupt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import cloudpickle
import pytest
from conftest import import_paths, wait_idle_workers

import raynb
from raynb.cluster.storage.rundir import CorruptRunDirectory
from raynb.train import FailureConfig, Result, RunConfig, ScalingConfig
from raynb.train.fit_run import execute_run
from raynb.train.torch import TorchTrainer

# Functions defined here travel by value, as a notebook's do.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

FOUR = ScalingConfig(num_workers=4)
REPO = str(Path(__file__).resolve().parents[3])


def _python(script: str, env: dict | None = None, timeout: float = 60.0) -> dict:
    """Run ``script`` in a new Python process; it prints one JSON object last."""
    full_env = dict(
        os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})
    )
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def _epochs(config):
    """``config["epochs"]`` epochs from the latest checkpoint, one all_reduce and one
    checkpoint each; rank ``fail_rank`` raises at epoch ``fail_at`` once (a flag file)."""
    import json
    import os
    import tempfile
    import time

    import torch
    import torch.distributed as dist

    from raynb.train import Checkpoint, get_checkpoint, get_context, report

    rank = get_context().get_world_rank()
    state = {"epoch": -1, "count": 0}
    ck = get_checkpoint()
    if ck is not None:
        with ck.as_directory() as d:
            state = json.load(open(os.path.join(d, "state.json")))
    resumed_from = state["epoch"]
    for epoch in range(state["epoch"] + 1, config["epochs"]):
        dist.all_reduce(torch.ones(1))
        if (
            rank == config.get("fail_rank")
            and epoch == config.get("fail_at")
            and not os.path.exists(config["flag"])
        ):
            open(config["flag"], "w").close()
            raise ValueError(f"bad batch at epoch {epoch}")
        time.sleep(config.get("sleep", 0))
        state = {"epoch": epoch, "count": state["count"] + 1}
        if rank == 0:
            print(f"epoch {epoch} done")
        with tempfile.TemporaryDirectory() as d:
            if rank == 0:
                json.dump(state, open(os.path.join(d, "state.json"), "w"))
            report(
                {"epoch": epoch, "loss": 1.0 / (epoch + 1), "resumed_from": resumed_from},
                checkpoint=Checkpoint.from_directory(d),
            )


def _finished_run(epochs: int = 2, name: str | None = None) -> Result:
    return TorchTrainer(
        _epochs,
        train_loop_config={"epochs": epochs},
        scaling_config=FOUR,
        run_config=RunConfig(name=name, verbose=0),
    ).fit()


def _snapshot(path: str) -> dict:
    """Every file and directory under ``path`` with its size, mtime and content hash."""
    out = {}
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            p = os.path.join(root, n)
            st = os.stat(p)
            digest = hashlib.sha256(open(p, "rb").read()).hexdigest() if n in files else None
            out[os.path.relpath(p, path)] = (st.st_size, st.st_mtime_ns, digest)
    out["."] = os.stat(path).st_mtime_ns
    return out


# -- a second client process ----------------------------------------------------------------


def test_second_process_lists_runs_and_loads_a_finished_run(warm):
    result = _finished_run(name=f"listed_{uuid.uuid4().hex[:6]}")
    got = _python(f"""
        import json, os, raynb
        df = raynb.runs()
        row = df[df["name"] == {result.name!r}].iloc[0]
        r = raynb.get_run({result.name!r})
        with r.checkpoint.as_directory() as d:
            state = json.load(open(os.path.join(d, "state.json")))
        print(json.dumps({{
            "columns": list(df.columns),
            "row": {{k: (None if row[k] is None else str(row[k])) for k in df.columns}},
            "state": r.state, "epochs": r.metrics_dataframe["epoch"].tolist(),
            "loss": r.metrics["loss"], "checkpoint": r.checkpoint.path, "ck_state": state,
            "best": [c.path for c, m in r.best_checkpoints], "logs": r.logs, "path": r.path}}))
    """)
    for col in ("name", "state", "start_time", "duration_s", "world_size", "path", "loss", "epoch"):
        assert col in got["columns"], got["columns"]
    row = got["row"]
    assert row["state"] == "FINISHED" and row["world_size"] == "4" and row["path"] == result.path
    assert 0 < float(row["duration_s"]) < 60
    assert float(row["loss"]) == pytest.approx(0.5) and float(row["epoch"]) == 1
    assert got["state"] == "FINISHED" and got["epochs"] == [0, 1] and got["loss"] == 0.5
    assert got["checkpoint"] == result.checkpoint.path == os.path.join(result.path, "checkpoint_000001")
    assert got["ck_state"] == {"epoch": 1, "count": 2}
    assert got["best"] == [c.path for c, _ in result.best_checkpoints]
    assert "(rank 0) epoch 1 done" in got["logs"], got["logs"]
    assert got["path"] == result.path


CLIENT_A = """
import json, os, sys, time
import raynb
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer
sys.path[:0] = {tests!r}
import test_runs
TorchTrainer(test_runs._epochs, train_loop_config={{"epochs": {epochs}, "sleep": 0.25}},
             scaling_config=ScalingConfig(num_workers=4),
             run_config=RunConfig(name={name!r}, verbose=0)).fit()
print(json.dumps({{"finished_in_a": True}}))
"""


def test_killed_client_leaves_run_finishing_and_attach_follows_it(warm):
    name = f"orphan_{uuid.uuid4().hex[:6]}"
    epochs = 14
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    a = subprocess.Popen(
        [sys.executable, "-c", CLIENT_A.format(tests=import_paths(__file__), epochs=epochs, name=name)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # wait until the run has reported twice
            assert a.poll() is None, a.communicate()
            known = [r for r in warm.status()["runs"] if r["name"] == name]
            if (
                known
                and known[0]["state"] == "RUNNING"
                and raynb.get_run(name).metrics_dataframe.shape[0] >= 2
            ):
                break
            assert time.monotonic() < deadline, "client A's run never got going"
            time.sleep(0.05)
        a.kill()  # SIGKILL: no cancel, no goodbye
        a.wait()
        assert a.returncode == -signal.SIGKILL
        got = _python(f"""
            import json, time, raynb
            t = time.time()
            r = raynb.attach({name!r}, verbose=0)
            print(json.dumps({{"attached_at": t, "state": r.state, "error": repr(r.error),
                              "epochs": r.metrics_dataframe["epoch"].tolist(),
                              "iters": r.metrics_dataframe["training_iteration"].tolist(),
                              "checkpoint": r.checkpoint.path}}))
        """)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    assert got["state"] == "FINISHED", got
    assert got["epochs"] == list(range(epochs)), got
    assert got["iters"] == list(range(1, epochs + 1))
    run = Result.from_path(os.path.dirname(got["checkpoint"]))
    assert run.state == "FINISHED"
    # B attached while the run was still going, and followed it to its end.
    ended = json.load(open(os.path.join(run.path, "run.json")))["ended"]
    assert got["attached_at"] < ended, (got["attached_at"], ended)
    assert got["checkpoint"].endswith(f"checkpoint_{epochs - 1:06d}")
    wait_idle_workers(warm, 4)


# -- run directories --------------------------------------------------------------------------


def test_result_from_path_with_no_cluster(warm, tmp_path):
    result = _finished_run(epochs=3)
    copy = tmp_path / "copied_run"
    shutil.copytree(result.path, copy)
    empty_home = tmp_path / "no_cluster_home"
    got = _python(
        f"""
        import json, os
        from raynb.train import Result
        r = Result.from_path({str(copy)!r})
        with r.checkpoint.as_directory() as d:
            state = json.load(open(os.path.join(d, "state.json")))
        print(json.dumps({{"state": r.state, "name": r.name, "epochs": r.metrics_dataframe["epoch"].tolist(),
                          "metrics": r.metrics, "checkpoint": r.checkpoint.path, "ck_state": state,
                          "n_best": len(r.best_checkpoints), "config": r.config, "error": repr(r.error)}}))
    """,
        env={"RAYNB_HOME": str(empty_home), "RAYNB_STORAGE_PATH": str(tmp_path / "none")},
    )
    assert got["state"] == "FINISHED" and got["name"] == result.name and got["error"] == "None"
    assert got["epochs"] == [0, 1, 2] and got["metrics"]["loss"] == pytest.approx(1 / 3)
    assert got["checkpoint"] == str(copy / "checkpoint_000002")
    assert got["ck_state"] == {"epoch": 2, "count": 3}
    assert got["n_best"] == 3 and got["config"] == {"epochs": 3}
    # No cluster was started or contacted for it.
    assert not (empty_home / "cluster.json").exists()
    assert not (empty_home / "logs").exists()


@pytest.mark.parametrize("damage", ["no run.json", "garbage params.json", "garbage function.pkl"])
def test_corrupt_run_dir_is_refused_naming_the_file_and_nothing_changes(warm, tmp_path, damage):
    result = _finished_run()
    path = str(tmp_path / "damaged")
    shutil.copytree(result.path, path)
    bad_file = {
        "no run.json": "run.json",
        "garbage params.json": "params.json",
        "garbage function.pkl": "function.pkl",
    }[damage]
    if damage == "no run.json":
        os.remove(os.path.join(path, "run.json"))
    else:
        with open(os.path.join(path, bad_file), "wb") as f:
            f.write(b"\x00{not json, not a pickle")
    time.sleep(0.01)
    before = _snapshot(path)
    if damage != "garbage function.pkl":
        with pytest.raises(CorruptRunDirectory) as e:
            Result.from_path(path)
        assert os.path.join(path, bad_file) in str(e.value), str(e.value)
    with pytest.raises(CorruptRunDirectory) as e:
        TorchTrainer.restore(path)
    assert os.path.join(path, bad_file) in str(e.value), str(e.value)
    if damage != "garbage function.pkl":
        # The head refuses to resume it too (the path %%ray_train --resume takes).
        with pytest.raises(ValueError) as e:
            execute_run(
                _epochs,
                {"epochs": 2},
                FOUR,
                RunConfig(name="damaged", storage_path=str(tmp_path), verbose=0),
                extra={"resume": True},
            )
        assert bad_file in str(e.value) and "Nothing was changed" in str(e.value), str(e.value)
    assert _snapshot(path) == before


def test_restore_continues_a_failed_run_in_place(warm, tmp_path):
    config = {"epochs": 5, "fail_rank": 2, "fail_at": 2, "flag": str(tmp_path / "failed_once")}
    with pytest.raises(raynb.RunError) as info:
        TorchTrainer(
            _epochs,
            train_loop_config=config,
            scaling_config=FOUR,
            run_config=RunConfig(verbose=0, failure_config=FailureConfig(0)),
        ).fit()
    failed = info.value.result
    assert failed.state == "FAILED" and failed.checkpoint.path.endswith("checkpoint_000001")
    first_rows = failed.metrics_dataframe["epoch"].tolist()
    assert first_rows in ([0, 1], [0, 1, 2]), first_rows
    assert TorchTrainer.can_restore(failed.path)
    # Restored with the function and config saved in the run directory.
    result = TorchTrainer.restore(failed.path).fit()
    assert result.state == "FINISHED" and result.path == failed.path and result.name == failed.name
    df = result.metrics_dataframe
    assert df["epoch"].tolist() == first_rows + [2, 3, 4]
    assert df["resumed_from"].tolist() == [-1] * len(first_rows) + [1, 1, 1]
    assert df["training_iteration"].tolist() == list(range(1, len(first_rows) + 4))
    assert sorted(n for n in os.listdir(result.path) if n.startswith("checkpoint_")) == [
        f"checkpoint_{i:06d}" for i in range(5)
    ]
    with result.checkpoint.as_directory() as d:
        assert json.load(open(os.path.join(d, "state.json"))) == {"epoch": 4, "count": 5}
    assert len(result.failures) == 1 and result.failures[0]["exc_type"] == "ValueError"
    on_disk = Result.from_path(result.path)
    assert on_disk.state == "FINISHED" and on_disk.metrics_dataframe["epoch"].tolist() == df["epoch"].tolist()
    assert raynb.get_run(result.name).state == "FINISHED"
    assert not [n for n in os.listdir(result.path) if n.startswith((".staging", ".tmp"))]


def test_restore_continues_a_cancelled_run(warm):
    """A run interrupted from the notebook (cancelled on every rank) is continued by
    restore from its latest checkpoint; a cancel is not counted as a failure."""
    import threading

    name = f"cancelled_{uuid.uuid4().hex[:6]}"
    run_dir = os.path.join(os.environ["RAYNB_STORAGE_PATH"], name)
    epochs = 10

    def interrupt_when_checkpointed():
        deadline = time.monotonic() + 20
        while not os.path.isdir(os.path.join(run_dir, "checkpoint_000001")):
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=interrupt_when_checkpointed)
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            TorchTrainer(
                _epochs,
                train_loop_config={"epochs": epochs, "sleep": 0.2},
                scaling_config=FOUR,
                run_config=RunConfig(name=name, verbose=0),
            ).fit()
    finally:
        t.join()
    cancelled = raynb.get_run(name)
    assert cancelled.state == "CANCELLED"
    done = len(cancelled.metrics_dataframe)
    assert 2 <= done < epochs
    assert Result.from_path(run_dir).state == "CANCELLED"
    wait_idle_workers(warm, 4)
    result = TorchTrainer.restore(run_dir).fit()
    assert result.state == "FINISHED" and result.path == run_dir and result.failures == []
    df = result.metrics_dataframe
    resumed = df["resumed_from"].max()
    assert 1 <= resumed < epochs - 1
    first = df[df["resumed_from"] == -1]["epoch"].tolist()
    assert first == list(range(len(first))) and resumed in first
    assert df[df["resumed_from"] == resumed]["epoch"].tolist() == list(range(resumed + 1, epochs))
    with result.checkpoint.as_directory() as d:
        assert json.load(open(os.path.join(d, "state.json"))) == {"epoch": epochs - 1, "count": epochs}


# -- %%ray_train --resume ---------------------------------------------------------------------

RESUMABLE_CELL = """%%ray_train --workers 4 --quiet --name {name} {resume} --config {{'flag': {flag!r}}}
import json, os, tempfile
import torch
from raynb.train import Checkpoint
ck = get_checkpoint()
start = 0
if ck is not None:
    with ck.as_directory() as d:
        start = json.load(open(os.path.join(d, "state.json")))["epoch"] + 1
for epoch in range(start, 3):
    torch.distributed.all_reduce(torch.ones(1))
    if epoch == 1 and get_context().get_world_rank() == 1 and not os.path.exists(config["flag"]):
        open(config["flag"], "w").close()
        raise RuntimeError("stopped at epoch 1")
    with tempfile.TemporaryDirectory() as d:
        json.dump({{"epoch": epoch}}, open(os.path.join(d, "state.json"), "w"))
        report({{"epoch": epoch, "start": start}}, checkpoint=Checkpoint.from_directory(d))
"""


def test_ray_train_resume_magic_continues_the_named_run(shell, warm, tmp_path):
    from IPython.utils.capture import capture_output

    name = f"magic_{uuid.uuid4().hex[:6]}"
    flag = str(tmp_path / "flag")
    with capture_output():
        res = shell.run_cell(RESUMABLE_CELL.format(name=name, resume="", flag=flag))
    assert isinstance(res.error_in_exec, raynb.RunError), res.error_in_exec
    assert "stopped at epoch 1" in str(res.error_in_exec)
    failed = shell.user_ns["_ray_result"]
    assert failed.state == "FAILED" and failed.checkpoint.path.endswith("checkpoint_000000")
    # The same name again without --resume is refused, the run directory untouched.
    before = _snapshot(failed.path)
    with capture_output():
        res = shell.run_cell(RESUMABLE_CELL.format(name=name, resume="", flag=flag))
    assert res.error_in_exec is not None and "already exists" in str(res.error_in_exec)
    assert "--resume" in str(res.error_in_exec)
    assert _snapshot(failed.path) == before
    # --resume continues it from checkpoint_000000, in the same directory.
    with capture_output() as cap:
        res = shell.run_cell(RESUMABLE_CELL.format(name=name, resume="--resume", flag=flag))
    assert res.error_in_exec is None and res.error_before_exec is None, (res.error_in_exec, cap.stdout)
    r = shell.user_ns["_ray_result"]
    assert r.state == "FINISHED" and r.path == failed.path
    rows = r.metrics_dataframe[["epoch", "start"]].to_dict("records")
    assert [x for x in rows if x["start"] == 1] == [{"epoch": 1, "start": 1}, {"epoch": 2, "start": 1}]
    assert [x["epoch"] for x in rows if x["start"] == 0] in ([0], [0, 1])
    assert r.checkpoint.path.endswith("checkpoint_000002")


# A head restarted after a clean stop (and after a SIGKILL) reading its finished runs back:
# test_fault_tolerance.py::test_head_sigkill_leaves_no_process_then_start_and_restore_work.
