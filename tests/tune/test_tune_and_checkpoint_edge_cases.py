"""Adversarial review of checkpoints / fault tolerance (issue 3) and Tune (issue 4):
each test here failed before the fix it comes with. Real cluster, real processes.
"""

from __future__ import annotations

import json
import os
import sys
import time

import cloudpickle
import pytest
from conftest import import_paths, wait_idle_workers

import raynb
from raynb.client.submit_and_follow import build_submission
from raynb.cluster.protocol import messages
from raynb.train import FailureConfig, RunConfig, ScalingConfig

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _submit(client, fn, config=None, workers=2, **rc):
    spec, payload = build_submission(
        fn, config, ScalingConfig(num_workers=workers), RunConfig(verbose=0, **rc)
    )
    reply = client.request(messages.SUBMIT_RUN, spec, reply_types=(messages.RUN_ACCEPTED,), buffers=[payload])
    assert reply.msg_type == messages.RUN_ACCEPTED, reply.content
    return spec["run_id"], reply.content


def _wait_for(client, run_id, pred, timeout):
    """Messages of ``run_id`` until ``pred(msg)`` holds; returns that message (or None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = client.recv(0.1)
        if msg is not None and msg.content.get("run_id") == run_id and pred(msg):
            return msg
    return None


def _fails_then_runs_long(config):
    """Attempt 0: rank 1 raises while rank 0 ignores the cancel for a while (it is
    killed after the grace period). Later attempts run long."""
    import time

    from raynb.cluster.worker import task_context
    from raynb.train import get_context

    rank = get_context().get_world_rank()
    if task_context.current()["attempt"] == 0:
        if rank == 1:
            time.sleep(0.2)
            raise ValueError("boom")
        end = time.time() + 5
        while time.time() < end:
            try:
                time.sleep(0.05)
            except KeyboardInterrupt:
                pass
        return
    time.sleep(30)


def test_cancel_while_failing_is_not_lost(warm):
    """A cancel (notebook interrupt, Tune STOP) that reaches the head while a run is
    FAILING (between a rank's failure and the restart) must end the run CANCELLED,
    not be dropped and let the run restart."""
    client = warm
    run_id, _ = _submit(client, _fails_then_runs_long, failure_config=FailureConfig(2))
    first_error = _wait_for(
        client,
        run_id,
        lambda m: m.msg_type == messages.RUN_EVENT and m.content["event"].get("kind") == "state",
        5,
    )
    assert first_error is not None
    # rank 1 raises at ~0.2 s; rank 0 holds the run in FAILING for the 1 s grace.
    time.sleep(0.5)
    st = {r["run_id"]: r["state"] for r in client.status()["runs"]}
    assert st[run_id] == "FAILING", st[run_id]
    client.send(messages.CANCEL_RUN, {"run_id": run_id})
    done = _wait_for(client, run_id, lambda m: m.msg_type == messages.RUN_DONE, 5)
    st = {r["run_id"]: r["state"] for r in client.status()["runs"]}
    if done is None:
        client.send(messages.CANCEL_RUN, {"run_id": run_id})  # clean up the restarted run
        _wait_for(client, run_id, lambda m: m.msg_type == messages.RUN_DONE, 5)
    assert done is not None, f"the cancel was dropped: the run is {st[run_id]} again"
    assert done.content["state"] == "CANCELLED"
    wait_idle_workers(client, 4)


def _counted(config):
    """Appends a line to ``<log>`` per execution, reports 3 times (slowly unless told)."""
    import time

    from raynb import tune

    with open(config["log"], "a") as f:
        f.write(f"{config['i']}\n")
    for step in range(3):
        time.sleep(config.get("sleep", 0.4))
        tune.report({"score": config["i"] * 10 + step})


def test_restore_after_kernel_kill_keeps_trials_that_finished_meanwhile(warm, tmp_path):
    """Runs outlive the kernel: a trial still running when the kernel was killed goes on
    and finishes on the head. Tuner.restore must take it as TERMINATED with its results,
    not wipe its directory and run it again from scratch."""
    import signal
    import subprocess

    log = tmp_path / "executions.log"
    script = tmp_path / "kernel.py"
    script.write_text(
        "import sys\n"
        f"sys.path[:0] = {import_paths(__file__)!r}\n"
        "import cloudpickle, test_tune_and_checkpoint_edge_cases as m\n"
        "cloudpickle.register_pickle_by_value(m)\n"
        "from raynb import tune\n"
        "from raynb.train import RunConfig\n"
        f"space = {{'i': tune.grid_search([1, 2]), 'log': {str(log)!r}}}\n"
        "tune.Tuner(m._counted, param_space=space, tune_config=tune.TuneConfig(metric='score', mode='max'),\n"
        f"           run_config=RunConfig(name='exp', storage_path={str(tmp_path)!r}, verbose=0)).fit()\n"
    )
    kernel = subprocess.Popen([sys.executable, str(script)])
    exp = tmp_path / "exp"
    try:
        deadline = time.monotonic() + 30
        # Killed once both trials have started (the state file says RUNNING).
        while time.monotonic() < deadline:
            try:
                state = (exp / "experiment_state.json").read_text()
            except OSError:
                state = ""
            if state.count('"RUNNING"') == 2 and log.exists() and len(log.read_text().split()) == 2:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the trials did not start")
    finally:
        kernel.send_signal(signal.SIGKILL)
        kernel.wait()
    wait_idle_workers(warm, 4)  # both trials' runs finished on the head meanwhile
    from raynb import tune

    grid = tune.Tuner.restore(str(exp), _counted).fit()
    assert sorted(log.read_text().split()) == ["1", "2"], "a finished trial ran again"
    assert [r.status for r in grid] == ["TERMINATED", "TERMINATED"]
    assert sorted(r.metrics["score"] for r in grid) == [12, 22]
    assert all(len(r.metrics_dataframe) == 3 for r in grid)


def _rank0_reports_then_peer_dies(config):
    """Only rank 0 calls report(checkpoint=...); rank 1 dies once after rank 0's 3rd report."""
    import os
    import signal
    import tempfile
    import time

    from raynb import train
    from raynb.train import Checkpoint, get_context

    rank = get_context().get_world_rank()
    for step in range(4):
        if rank == 0:
            with tempfile.TemporaryDirectory() as d:
                open(os.path.join(d, "s"), "w").write(str(step))
                train.report({"step": step}, checkpoint=Checkpoint.from_directory(d))
        time.sleep(0.15)
        if step == 2 and rank == 1 and not os.path.exists(config["flag"]):
            open(config["flag"], "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


def test_restart_note_tells_why_reported_checkpoints_were_not_saved(warm, tmp_path):
    """The restart note must not say "no checkpoint yet" as if none had been reported: it
    names the unsaved checkpoints, the ranks that never made the report, and what to do."""
    client = warm
    run_id, _ = _submit(
        client,
        _rank0_reports_then_peer_dies,
        {"flag": str(tmp_path / "flag")},
        failure_config=FailureConfig(1),
    )
    notes = []
    done = _wait_for(
        client,
        run_id,
        lambda m: (
            m.msg_type == messages.RUN_DONE
            or (m.content["event"].get("kind") == "note" and notes.append(m.content["event"]["text"]))
        ),
        20,
    )
    assert done is not None and done.content["state"] == "FINISHED", done and done.content
    restart = [n for n in notes if n.startswith("restart 1/1")]
    assert len(restart) == 1, notes
    assert "no checkpoint saved yet, starting over" in restart[0], restart
    assert "reported checkpoint(s) were not saved: rank(s) 1 had not made report 1" in restart[0], restart
    assert "call report() on every rank" in restart[0], restart
    wait_idle_workers(client, 4)


_RDZV_SCRIPT = r"""
import os, signal, sys, time
import raynb
from raynb.cluster.launch import start_cluster, stop_cluster
from raynb.train import FailureConfig, RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

def loop(config):
    import os, signal, time
    import torch, torch.distributed as dist
    from raynb.train import get_context, report
    t = torch.ones(1)
    dist.all_reduce(t)
    report({"sum": t.item()})
    if get_context().get_world_rank() == 1 and not os.path.exists(config["flag"]):
        open(config["flag"], "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.2)

start_cluster(num_workers=4)
raynb.connect()
for n in (2, 4, 3):
    TorchTrainer(loop, train_loop_config={"flag": sys.argv[1] + str(n)},
                 scaling_config=ScalingConfig(num_workers=n),
                 run_config=RunConfig(verbose=0, failure_config=FailureConfig(1))).fit()
raynb.disconnect()
assert stop_cluster()
"""


def test_no_rendezvous_files_left_in_tmp_after_a_cluster_stops(tmp_path):
    """Single-node process groups rendezvous through a FileStore file in the temp dir. A
    worker that is killed, or that exits with the cluster (os._exit), never drops its
    reference, so torch never removes the file: every cluster session and every dead
    worker left a raynb-rdzv-* file in /tmp for good."""
    import subprocess

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = tmp_path / "session.py"
    script.write_text(_RDZV_SCRIPT)
    env = dict(
        os.environ,
        TMPDIR=str(tmp),
        RAYNB_HOME=str(tmp_path / "home"),
        RAYNB_STORAGE_PATH=str(tmp_path / "results"),
        RAYNB_PROGRESS="text",
    )
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "flag")],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    time.sleep(0.5)
    left = [p for p in os.listdir(tmp) if p.startswith("raynb-rdzv")]
    assert left == [], f"rendezvous files left behind in {tmp}: {left}"
    rdzv = tmp_path / "home" / "rdzv"  # where the node agent keeps them now
    assert rdzv.is_dir() and list(rdzv.iterdir()) == [], list(rdzv.iterdir())


def test_a_killed_node_agents_rendezvous_dir_is_removed_by_the_next_agent(tmp_path, monkeypatch):
    """A SIGKILLed node agent cannot remove its rendezvous directory: the next agent
    removes every one whose agent's pid is gone, and keeps the live ones."""
    import subprocess

    from raynb.cluster.node.agent import _rendezvous_dir

    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "home"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "home").mkdir(mode=0o700)
    (tmp_path / "home" / "rdzv").mkdir(mode=0o700)
    stale = tmp_path / "home" / "rdzv" / f"local-{dead.pid}"
    (stale / "raynb-rdzv-abc").mkdir(parents=True)
    live = tmp_path / "home" / "rdzv" / f"other-{os.getppid()}"
    live.mkdir()
    mine = _rendezvous_dir("local")
    assert not stale.exists() and live.is_dir()
    assert mine == str(tmp_path / "home" / "rdzv" / f"local-{os.getpid()}") and os.path.isdir(mine)


def _one_report(config):
    from raynb import tune

    tune.report({"score": config["i"]})


def test_result_from_path_of_a_tune_experiment_and_of_its_trial(warm, tmp_path):
    """A trial's directory reads back as a Result; the experiment directory gets an error
    saying what it is and what to do, not "run.json is missing ... copied whole?"."""
    from raynb import tune
    from raynb.cluster.storage.rundir import CorruptRunDirectory
    from raynb.train import Result
    from raynb.train.torch import TorchTrainer

    grid = tune.Tuner(
        _one_report,
        param_space={"i": tune.grid_search([3, 4])},
        run_config=RunConfig(name="exp", storage_path=str(tmp_path), verbose=0),
    ).fit()
    trial = Result.from_path(grid[1].path)
    assert trial.state == "FINISHED" and trial.metrics["score"] == 4
    for read in (Result.from_path, TorchTrainer.restore):
        with pytest.raises(CorruptRunDirectory) as e:
            read(grid.experiment_path)
        msg = str(e.value)
        assert "is a Tune experiment directory" in msg and "Tuner.restore(" in msg, msg
        assert repr(grid[0].path) in msg, msg
        assert "copied whole" not in msg


def _reports_until_interrupted(config):
    import time

    from raynb import tune

    for i in range(400):
        tune.report({"i": i, "score": config["k"]})
        time.sleep(0.05)


def test_restore_then_get_results_reads_without_deleting_anything(warm, tmp_path):
    """Tuner.restore(path, trainable).get_results() is how an interrupted experiment is read
    back: it must not remove the directories (and partial results) of PAUSED trials that
    have no checkpoint; that may only happen when fit() actually starts them over."""
    import signal
    import threading

    from raynb import tune

    tuner = tune.Tuner(
        _reports_until_interrupted,
        param_space={"k": tune.grid_search([1, 2])},
        run_config=RunConfig(name="exp", storage_path=str(tmp_path), verbose=0),
    )
    timer = threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        grid = tuner.fit()
    finally:
        timer.cancel()
    assert grid.interrupted and [r.status for r in grid] == ["PAUSED", "PAUSED"]
    partial = [len(r.metrics_dataframe) for r in grid]
    assert min(partial) > 0
    wait_idle_workers(warm, 4)

    read = tune.Tuner.restore(grid.experiment_path, _reports_until_interrupted).get_results()
    assert all(os.path.isdir(r.path) for r in grid), "restore() deleted trial directories"
    assert [r.status for r in read] == ["PAUSED", "PAUSED"]
    assert [len(r.metrics_dataframe) for r in read] == partial
    again = tune.Tuner.restore(grid.experiment_path, _reports_until_interrupted)
    assert [len(r.metrics_dataframe) for r in again.get_results()] == partial


def _many_reports(config):
    from raynb import tune

    for i in range(5000):
        tune.report({f"m{j}": i * 0.5 + j for j in range(10)})


def test_head_memory_does_not_keep_every_report_of_ended_runs(warm, tmp_path):
    """The head keeps up to 1000 ended runs; it must not keep every report row of each
    (a second identical experiment grew the head by another ~70 MiB, and so on)."""
    import psutil

    from raynb import tune

    head = psutil.Process(warm.status()["pid"])
    rss = []
    for k in range(3):
        tune.Tuner(
            _many_reports,
            param_space={"i": tune.grid_search(list(range(8)))},
            run_config=RunConfig(name=f"mem{k}", storage_path=str(tmp_path), verbose=0),
        ).fit()
        rss.append(head.memory_info().rss / 2**20)
    # 40k rows per experiment held ~67 MiB: the 2nd and 3rd experiments reuse what the
    # 1st freed instead.
    assert rss[2] - rss[0] < 25, f"head RSS after each experiment (MiB): {rss}"
    wait_idle_workers(warm, 4)


def _fails_first_attempts(config):
    """Raises in the first ``config['fails']`` attempts over all fits (a counter file)."""
    import os

    from raynb.train import report

    path = config["counter"]
    n = int(open(path).read()) if os.path.exists(path) else 0
    open(path, "w").write(str(n + 1))
    report({"attempt_no": n})
    if n < config["fails"]:
        raise RuntimeError(f"failure {n}")


def test_restore_gets_its_own_restart_budget(warm, tmp_path):
    """FailureConfig(max_failures=1) allows one restart per fit(). A run restored after
    its earlier failures (or after the head died under it) must not find its budget spent
    by them: its first new failure ended it at once."""
    from raynb.errors import RunError
    from raynb.train.torch import TorchTrainer

    cfg = {"counter": str(tmp_path / "n"), "fails": 3}
    rc = RunConfig(name="budget", storage_path=str(tmp_path), verbose=0, failure_config=FailureConfig(1))
    with pytest.raises(RunError):
        TorchTrainer(
            _fails_first_attempts,
            train_loop_config=cfg,
            scaling_config=ScalingConfig(num_workers=1),
            run_config=rc,
        ).fit()
    assert open(cfg["counter"]).read() == "2"  # attempts 0 and 1 failed: budget spent
    result = TorchTrainer.restore(str(tmp_path / "budget")).fit()  # attempt 2 fails, 3 succeeds
    assert result.state == "FINISHED"
    assert open(cfg["counter"]).read() == "4"
    assert len(result.failures) == 3  # the record keeps every failure


def _reports_broken_checkpoint(config):
    import os
    import tempfile

    from raynb.train import Checkpoint, report

    d = tempfile.mkdtemp()
    open(os.path.join(d, "model.pt"), "w").write("w")
    os.makedirs(os.path.join(d, "nested", "deeper"))
    open(os.path.join(d, "nested", "deeper", "opt.pt"), "w").write("o")
    os.symlink(os.path.join(d, "nested"), os.path.join(d, "link_to_dir"))
    if config["broken"]:
        os.symlink("/nonexistent/raynb-target", os.path.join(d, "dangling"))
        os.symlink(".", os.path.join(d, "loop"))
    report({"x": 1}, checkpoint=Checkpoint.from_directory(d))


def test_checkpoint_with_symlinks_nested_dirs_and_a_broken_link(warm, tmp_path):
    """Nested directories and a symlink to a directory are copied (followed). A dangling
    link or a link loop gives an error that names the checkpoint and the first bad file in
    one line, not shutil's list of tuples (16 kB for a loop) naming raynb's staging paths,
    and leaves no half-copied staging directory behind."""
    from raynb.errors import RunError
    from raynb.train.torch import TorchTrainer

    ok = TorchTrainer(
        _reports_broken_checkpoint,
        train_loop_config={"broken": False},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    ck = ok.checkpoint.path
    assert open(os.path.join(ck, "nested", "deeper", "opt.pt")).read() == "o"
    assert open(os.path.join(ck, "link_to_dir", "deeper", "opt.pt")).read() == "o"
    with pytest.raises(RunError) as e:
        TorchTrainer(
            _reports_broken_checkpoint,
            train_loop_config={"broken": True},
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(name="broken", storage_path=str(tmp_path), verbose=0),
        ).fit()
    msg = e.value.errors[0]["message"]
    assert "could not copy checkpoint" in msg and "dangling" in msg, msg[:2000]
    assert ".staging" not in msg and "[(" not in msg and len(msg) < 1000, msg[:2000]
    assert not os.path.exists(tmp_path / "broken" / ".staging")


_STAGING_CLIENT = r"""
import sys
sys.path[:0] = {tests!r}
import cloudpickle, test_tune_and_checkpoint_edge_cases as m
cloudpickle.register_pickle_by_value(m)
import raynb
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer
raynb.connect()
TorchTrainer(m._rank0_checkpoints_slowly, scaling_config=ScalingConfig(num_workers=2),
             run_config=RunConfig(name="staged", verbose=0)).fit()
"""


def _rank0_checkpoints_slowly():
    import os
    import tempfile
    import time

    from raynb.train import Checkpoint, get_context, report

    for step in range(200):
        if get_context().get_world_rank() == 0:
            with tempfile.TemporaryDirectory() as d:
                open(os.path.join(d, "s"), "w").write(str(step))
                report({"step": step}, checkpoint=Checkpoint.from_directory(d))
        time.sleep(0.1)


def test_head_restarted_after_sigkill_clears_the_dead_runs_staging(tmp_path, monkeypatch):
    """A head SIGKILLed while a run had staged (uncommitted) checkpoints: the next head
    reads the run back as FAILED and removes its .staging (it stayed for good unless the
    run was resumed)."""
    import signal
    import subprocess

    from conftest import alive

    from raynb.cluster.launch import cluster_pids, start_cluster, stop_cluster

    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RAYNB_STORAGE_PATH", str(tmp_path / "results"))
    info, started = start_cluster(num_workers=2)
    assert started
    pids = cluster_pids(info)
    pids2: list[int] = []
    client = subprocess.Popen(
        [sys.executable, "-c", _STAGING_CLIENT.format(tests=import_paths(__file__))],
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    run_dir = tmp_path / "results" / "staged"
    try:
        deadline = time.monotonic() + 60
        while not (run_dir / ".staging").is_dir() or len(os.listdir(run_dir / ".staging")) < 2:
            assert client.poll() is None and time.monotonic() < deadline, "nothing was staged"
            time.sleep(0.05)
        os.kill(info["pids"]["head"], signal.SIGKILL)
        t0 = time.monotonic()
        while alive(pids) and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        assert not alive(pids)
        client.kill()
        client.wait()
        info2, started2 = start_cluster(num_workers=2)
        assert started2
        pids2 = cluster_pids(info2)
        record = json.loads((run_dir / "run.json").read_text())
        assert record["state"] == "FAILED"
        left = [n for n in os.listdir(run_dir) if n.startswith((".staging", ".tmp"))]
        assert left == [], f"left in the dead run's directory: {left}"
        assert stop_cluster()
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        for pid in alive(pids + pids2):
            os.kill(pid, signal.SIGKILL)


RESUME_CELL = """%%ray_train {opts} --quiet --name {name} --storage-path {storage}
import os
from raynb.train import get_context, report
report({{"world": get_context().get_world_size()}})
if get_context().get_world_rank() == 0 and not os.path.exists({flag!r}):
    open({flag!r}, "w").close()
    raise RuntimeError("first attempt fails")
"""


def test_ray_train_resume_keeps_the_runs_settings(shell, warm, tmp_path):
    """%%ray_train --resume --name X continues X as TorchTrainer.restore does: with its world
    size, max_failures and checkpoint settings unless given again (it silently ran on the
    default 4 ranks, with no restarts and no pruning, and overwrote the recorded settings).
    Resuming a run that does not exist is refused, naming it, before anything runs."""
    from IPython.utils.capture import capture_output

    flag = str(tmp_path / "flag")
    storage = str(tmp_path)
    with capture_output():
        res = shell.run_cell(
            RESUME_CELL.format(opts="--workers 2 --keep 3", name="r2", storage=storage, flag=flag)
        )
    assert isinstance(res.error_in_exec, raynb.RunError), res.error_in_exec
    with capture_output():
        res = shell.run_cell(RESUME_CELL.format(opts="--resume", name="r2", storage=storage, flag=flag))
    assert res.error_in_exec is None, res.error_in_exec
    r = shell.user_ns["_ray_result"]
    assert r.state == "FINISHED" and r.metrics_dataframe["world"].tolist()[-1] == 2
    record = json.loads((tmp_path / "r2" / "run.json").read_text())
    assert record["world_size"] == 2
    assert (record["checkpoint_config"] or {}).get("num_to_keep") == 3

    with capture_output():
        res = shell.run_cell(RESUME_CELL.format(opts="--resume", name="nope", storage=storage, flag=flag))
    assert res.error_in_exec is not None and "cannot resume run 'nope'" in str(res.error_in_exec)
    assert not (tmp_path / "nope").exists()


def _three_checkpoints():
    import os
    import tempfile

    from raynb.train import Checkpoint, report

    for step in range(3):
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "s"), "w").write(str(step))
            report({"loss": 1.0 / (step + 1), "step": step}, checkpoint=Checkpoint.from_directory(d))


def test_checkpoint_score_attribute_never_reported_is_said(warm, tmp_path):
    """CheckpointConfig(checkpoint_score_attribute='acc') when no report has 'acc' (a typo):
    pruning silently kept the newest instead of the best. The run says so once, naming the
    attribute and the keys that were reported."""
    from raynb.train import CheckpointConfig

    client = warm
    run_id, _ = _submit(
        client,
        _three_checkpoints,
        workers=1,
        storage_path=str(tmp_path),
        checkpoint_config=CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="acc"),
    )
    notes = []
    done = _wait_for(
        client,
        run_id,
        lambda m: (
            m.msg_type == messages.RUN_DONE
            or (m.content["event"].get("kind") == "note" and notes.append(m.content["event"]["text"]))
        ),
        20,
    )
    assert done is not None and done.content["state"] == "FINISHED"
    said = [n for n in notes if "'acc'" in n]
    assert len(said) == 1, notes
    assert "checkpoint_score_attribute" in said[0] and "loss" in said[0] and "step" in said[0], said


_KERNEL_FIT = r"""
import sys
sys.path[:0] = {tests!r}
import cloudpickle, test_tune_and_checkpoint_edge_cases as m
cloudpickle.register_pickle_by_value(m)
from raynb import tune
from raynb.train import RunConfig
tune.Tuner(m._counted, param_space={{"i": tune.grid_search([1, 2]), "log": {log!r}, "sleep": {sleep}}},
           run_config=RunConfig(name="exp", storage_path={storage!r}, verbose=0)).fit()
"""

_KERNEL_RESTORE = r"""
import sys, json
sys.path[:0] = {tests!r}
import cloudpickle, test_tune_and_checkpoint_edge_cases as m
cloudpickle.register_pickle_by_value(m)
from raynb import tune
grid = tune.Tuner.restore({path!r}, m._counted).fit()
print(json.dumps([[r.status, len(r.metrics_dataframe)] for r in grid]))
"""


def test_restore_resumes_trials_whose_runs_the_cluster_stop_failed(tmp_path, monkeypatch):
    """The kernel died mid-fit, then the cluster was stopped (`raynb stop`, a reboot's
    SIGTERM), which fails the active runs. Tuner.restore resumes those trials (the cluster
    stop is not the trial's error) rather than calling them ERROR."""
    import signal
    import subprocess

    from conftest import alive

    from raynb.cluster.launch import cluster_pids, start_cluster, stop_cluster

    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "home"))
    log = str(tmp_path / "log")
    info, started = start_cluster(num_workers=2)
    assert started
    pids = cluster_pids(info)
    tests = import_paths(__file__)
    kernel = subprocess.Popen(
        [sys.executable, "-c", _KERNEL_FIT.format(tests=tests, log=log, sleep=2.0, storage=str(tmp_path))]
    )
    try:
        deadline = time.monotonic() + 60
        while not (os.path.exists(log) and len(open(log).read().split()) == 2):
            assert kernel.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)  # the state file says RUNNING
        kernel.kill()
        kernel.wait()
        assert stop_cluster()
        info2, started = start_cluster(num_workers=2)
        pids += cluster_pids(info2)
        p = subprocess.run(
            [sys.executable, "-c", _KERNEL_RESTORE.format(tests=tests, path=str(tmp_path / "exp"))],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stderr[-3000:]
        got = json.loads(p.stdout.strip().splitlines()[-1])
        assert got == [["TERMINATED", 3], ["TERMINATED", 3]], got
        assert stop_cluster()
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()
        for pid in alive(pids):
            os.kill(pid, signal.SIGKILL)


def test_runs_lists_a_failing_run_with_its_duration(warm):
    """raynb.runs() gave a run between a failure and its restart (FAILING) or being
    cancelled (CANCELLING) no duration_s, as if it had not started."""
    client = warm
    run_id, accepted = _submit(client, _fails_then_runs_long, failure_config=FailureConfig(0))
    assert (
        _wait_for(
            client,
            run_id,
            lambda m: m.msg_type == messages.RUN_EVENT and m.content["event"].get("state") == "RUNNING",
            5,
        )
        is not None
    )
    time.sleep(0.5)  # rank 1 raised at 0.2 s; rank 0 holds the run in FAILING for 1 s
    df = raynb.runs()
    row = df[df["name"] == accepted["name"]].iloc[0]
    assert row["state"] == "FAILING"
    assert row["duration_s"] == row["duration_s"] and row["duration_s"] > 0.3, row.to_dict()
    _wait_for(client, run_id, lambda m: m.msg_type == messages.RUN_DONE, 10)
    wait_idle_workers(client, 4)


def _raises_at_once():
    raise ValueError("a bug that fails every attempt " + "x" * 300)


def test_unlimited_restarts_keep_a_bounded_record(warm, tmp_path):
    """FailureConfig(max_failures=-1) with a function that fails at once restarts ~100
    times a second. The run's record kept every failure (traceback and all) in the head's
    memory and rewrote all of them into run.json at each restart: O(n^2) writes, MBs
    within seconds, the head slowing down until it stalls. It keeps the first and latest
    failures and counts the rest."""
    client = warm
    run_id, accepted = _submit(
        client, _raises_at_once, workers=1, storage_path=str(tmp_path), failure_config=FailureConfig(-1)
    )
    last = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        msg = client.recv(0.1)
        if msg is not None and msg.content.get("run_id") == run_id and msg.msg_type == messages.RUN_EVENT:
            ev = msg.content["event"]
            if ev.get("kind") == "note" and ev.get("text", "").startswith("restart "):
                last = ev["text"]
                if int(last.split()[1].split("/")[0]) >= 250:
                    break
    assert last is not None and last.startswith("restart 25") and "/unlimited:" in last, last
    client.send(messages.CANCEL_RUN, {"run_id": run_id})
    done = _wait_for(client, run_id, lambda m: m.msg_type == messages.RUN_DONE, 10)
    assert done is not None and done.content["state"] == "CANCELLED"
    record = json.loads((tmp_path / accepted["name"] / "run.json").read_text())
    assert len(record["failures"]) <= 100, len(record["failures"])
    assert record["num_failures"] >= 250
    assert "a bug that fails every attempt" in record["failures"][0]["message"]
    assert len(done.content["failures"]) <= 100
    wait_idle_workers(client, 4)


def _pbt_many_files(config):
    import json
    import os
    import tempfile

    from raynb import tune
    from raynb.train import Checkpoint

    w, start = 0.0, 0
    ck = tune.get_checkpoint()
    if ck is not None:
        state = json.load(open(os.path.join(ck.path, "state.json")))
        w, start = state["w"], state["step"] + 1
    for step in range(start, 12):
        w += config["lr"]
        with tempfile.TemporaryDirectory() as d:
            for i in range(800):  # a checkpoint that takes a while to copy
                open(os.path.join(d, f"f{i}"), "w").write("x")
            json.dump({"w": w, "step": step}, open(os.path.join(d, "state.json"), "w"))
            tune.report({"w": w}, checkpoint=Checkpoint.from_directory(d))


def test_pbt_exploit_survives_the_donor_pruning_its_checkpoint_mid_copy(warm, tmp_path):
    """PBT with CheckpointConfig(num_to_keep=1): the donor runs on and its next report
    prunes the checkpoint the exploit is copying. shutil.Error (files vanishing mid-copy)
    escaped and ended the whole fit(); it is now one more pruned source: the exploit takes
    the donor's newest checkpoint instead, and every adopted checkpoint is whole."""
    from raynb import tune
    from raynb.train import CheckpointConfig
    from raynb.tune.schedulers import PopulationBasedTraining

    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=2,
        hyperparam_mutations={"lr": [0.01, 0.1, 1.0, 10.0]},
        quantile_fraction=0.5,
        resample_probability=0.0,
        seed=0,
    )
    grid = tune.Tuner(
        _pbt_many_files,
        param_space={"lr": tune.grid_search([0.01, 0.1, 1.0, 10.0])},
        tune_config=tune.TuneConfig(metric="w", mode="max", scheduler=pbt),
        run_config=RunConfig(
            storage_path=str(tmp_path), verbose=0, checkpoint_config=CheckpointConfig(num_to_keep=1)
        ),
    ).fit()
    assert [r.status for r in grid] == ["TERMINATED"] * 4
    assert sum(r._trial.extra.get("exploits", 0) for r in grid) >= 1
    for r in grid:
        for c in os.listdir(r.path):
            if c.startswith("checkpoint_"):
                assert len(os.listdir(os.path.join(r.path, c))) == 801, (r.path, c)
        assert not os.path.exists(os.path.join(r.path, ".staging"))
    wait_idle_workers(warm, 4)


def _reports_one():
    from raynb.train import report

    report({"x": 1})


def test_relative_storage_path_is_the_notebooks_not_the_heads(warm, tmp_path, monkeypatch):
    """RunConfig(storage_path="results") from a notebook in another directory than the one
    the cluster was started from: the run went to <head's cwd>/results, and Result.path,
    relative, pointed nowhere from the notebook (Result.from_path failed)."""
    import shutil

    import psutil

    from raynb.train import Result
    from raynb.train.torch import TorchTrainer

    head_cwd = psutil.Process(warm.status()["pid"]).cwd()
    assert os.path.realpath(head_cwd) != os.path.realpath(tmp_path)
    stray = os.path.join(head_cwd, "rel_results_review")
    assert not os.path.exists(stray)
    monkeypatch.chdir(tmp_path)
    try:
        r = TorchTrainer(
            _reports_one,
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(name="rel", storage_path="rel_results_review", verbose=0),
        ).fit()
        assert not os.path.exists(stray), "written relative to the head's working directory"
        assert os.path.isdir(tmp_path / "rel_results_review" / "rel")
        assert Result.from_path(r.path).metrics["x"] == 1
    finally:
        shutil.rmtree(stray, ignore_errors=True)
