"""Elastic runs on real clusters: growing, shrinking, a node leaving, the magic's worker
range (the pure tests of the elastic decisions are in test_elastic.py)."""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest
from conftest import private_cluster

from raynb.train import FailureConfig, RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- real runs ----------------------------------------------------------------------
def _train(config):
    """An all_reduce at each attempt's start (the group of this size works), then epochs
    without collectives, a checkpoint each. Rank ``victim`` SIGKILLs itself once at the
    start of epoch ``kill_at`` (a flag file)."""
    import json
    import os
    import signal
    import tempfile
    import time

    import torch
    import torch.distributed as dist

    from raynb.train import Checkpoint, get_checkpoint, get_context, report

    ctx = get_context()
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == ctx.get_world_size()
    state = {"epoch": -1}
    ck = get_checkpoint()
    if ck is not None:
        with ck.as_directory() as d:
            with open(os.path.join(d, "state.json")) as f:
                state = json.load(f)
    resumed_from = state["epoch"]
    for epoch in range(state["epoch"] + 1, config["epochs"]):
        if (
            ctx.get_world_rank() == config.get("victim")
            and epoch == config.get("kill_at")
            and not os.path.exists(config["flag"])
        ):
            open(config["flag"], "w").close()
            time.sleep(0.5)  # the peers' reports of the epoch before are in: it is committed
            os.kill(os.getpid(), signal.SIGKILL)
        hold = config.get("hold_until")
        if hold and epoch == 3 and ctx.get_world_size() < 4:
            deadline = (
                time.monotonic() + 120
            )  # a node agent's start (its zygote imports torch) on a busy machine
            while not os.path.exists(hold) and time.monotonic() < deadline:
                time.sleep(0.05)
        time.sleep(config.get("sleep", 0.05))
        with tempfile.TemporaryDirectory() as d:
            if ctx.get_world_rank() == 0:
                with open(os.path.join(d, "state.json"), "w") as f:
                    json.dump({"epoch": epoch}, f)
            report({"epoch": epoch, "resumed_from": resumed_from}, checkpoint=Checkpoint.from_directory(d))
        if config.get("started") and epoch == 1:
            open(config["started"], "a").close()


def test_elastic_run_starts_with_what_it_can_place(tmp_path, monkeypatch, capsys):
    with private_cluster(tmp_path, monkeypatch, workers=2, max_workers=3):
        result = TorchTrainer(
            _train,
            train_loop_config={"epochs": 3, "flag": str(tmp_path / "f")},
            scaling_config=ScalingConfig(num_workers=(2, 8)),
            run_config=RunConfig(verbose=1, storage_path=str(tmp_path / "r")),
        ).fit()
    out = capsys.readouterr().out
    assert result.state == "FINISHED", result.error
    # Two warm workers and room for one more on the node: three ranks, said once.
    assert list(result.metrics_dataframe["world_size"]) == [3, 3, 3]
    live = out.split("] FINISHED")[0]  # (the summary after it lists the run's notes again)
    assert live.count("this cluster holds at most 3 workers; started with 3") == 1, out


def test_elastic_run_shrinks_after_a_rank_is_killed(tmp_path, monkeypatch, capsys):
    # Three warm workers, room for four: the run starts on four; after the kill, the node is
    # back at its warm count, so no replacement comes and the restart goes on with three.
    with private_cluster(tmp_path, monkeypatch, workers=3, max_workers=4):
        result = TorchTrainer(
            _train,
            train_loop_config={
                "epochs": 5,
                "kill_at": 2,
                "victim": 3,
                "sleep": 0.2,
                "flag": str(tmp_path / "f"),
            },
            scaling_config=ScalingConfig(num_workers=(1, 4)),
            run_config=RunConfig(
                verbose=1, storage_path=str(tmp_path / "r"), failure_config=FailureConfig(max_failures=1)
            ),
        ).fit()
    out = capsys.readouterr().out
    assert result.state == "FINISHED", result.error
    assert len(result.failures) == 1 and result.failures[0]["signal"] == "SIGKILL"
    rows = result.metrics_dataframe.to_dict("records")
    first = [r for r in rows if r["resumed_from"] == -1]
    second = [r for r in rows if r["resumed_from"] != -1]
    assert {r["world_size"] for r in first} == {4} and {r["world_size"] for r in second} == {3}, rows
    # Resumed from the last committed checkpoint: every later epoch trained once.
    start = int(second[0]["resumed_from"])
    assert [int(r["epoch"]) for r in second] == list(range(start + 1, 5)), rows
    assert "shrank 4 -> 3 ranks (rank 3 died, SIGKILL); resumed from checkpoint_" in out, out


def test_fixed_run_is_unchanged(tmp_path, monkeypatch):
    with private_cluster(tmp_path, monkeypatch, workers=2):
        result = TorchTrainer(
            _train,
            train_loop_config={"epochs": 2, "flag": str(tmp_path / "f")},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(verbose=0, storage_path=str(tmp_path / "r")),
        ).fit()
    assert result.state == "FINISHED", result.error
    assert "world_size" not in result.metrics_dataframe.columns  # as before: no column added


def _start_node(info: dict, node_id: str, workers: int):
    """A second node agent on this machine (as `raynb node` on another host), joining the head."""
    import subprocess

    from raynb.cluster.connection_file import connection_file_path

    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "raynb.cli",
            "node",
            "--address",
            info["address"],
            "--key-file",
            str(connection_file_path()),
            "--workers",
            str(workers),
            "--max-workers",
            str(workers),
            "--node-id",
            node_id,
            "--shared-storage",
            "--reconnect",
            "5",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop_node(proc) -> None:
    import psutil
    from conftest import alive

    kids = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    proc.terminate()
    proc.wait(20)
    deadline = time.monotonic() + 10
    while alive(kids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(kids), kids


def test_elastic_run_grows_when_a_node_joins(tmp_path, monkeypatch, capsys):
    """(1, 4) on a node that holds 2: it starts on 2; a node with 2 more joins mid-run; at
    the next interval it is marked to grow, and after its next checkpoint it restarts on
    4 ranks from that checkpoint, with no failure counted and every epoch trained once."""
    import threading

    flag = tmp_path / "started"
    with private_cluster(tmp_path, monkeypatch, workers=2, max_workers=2) as (info, client, _):
        node = {}

        def join():
            deadline = time.monotonic() + 60
            while not flag.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            node["proc"] = _start_node(info, "n2", 2)
            _wait_node_ready("n2", 2)
            ready.touch()  # the run, held at epoch 3 until now, goes on and sees the room

        ready = tmp_path / "n2-ready"
        t = threading.Thread(target=join)
        t.start()
        try:
            result = TorchTrainer(
                _train,
                train_loop_config={
                    "epochs": 40,
                    "sleep": 0.25,
                    "flag": str(flag),
                    "victim": -1,
                    "started": str(flag),
                    "hold_until": str(ready),
                },
                scaling_config=ScalingConfig(num_workers=(1, 4), elastic_resize_monitor_interval_s=0.5),
                run_config=RunConfig(verbose=1, storage_path=str(tmp_path / "r")),
            ).fit()
        finally:
            t.join()
            if "proc" in node:
                _stop_node(node["proc"])
    out = capsys.readouterr().out
    assert result.state == "FINISHED", result.error
    assert result.failures == [] or not result.failures, result.failures
    rows = result.metrics_dataframe.to_dict("records")
    sizes = [int(r["world_size"]) for r in rows]
    assert sizes[0] == 2 and sizes[-1] == 4, sizes
    assert sizes == sorted(sizes), sizes  # 2s, then 4s
    grown = [r for r in rows if r["world_size"] == 4]
    start = int(grown[0]["resumed_from"])
    assert start >= 0 and [int(r["epoch"]) for r in grown] == list(range(start + 1, 40)), rows
    assert "grew 2 -> 4 ranks (node n2 joined); resumed from checkpoint_" in out, out


def _wait_workers(client, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while sum(w["state"] == "idle" for w in client.status()["workers"]) < n:
        assert time.monotonic() < deadline, client.status()["workers"]
        time.sleep(0.1)


def _wait_node_gone(info: dict, node_id: str, timeout: float = 60.0) -> None:
    """Until the head no longer lists ``node_id`` (asked on a connection of this thread's own)."""
    from raynb.cluster.connection_file import read_connection_file
    from raynb.cluster.protocol.control import Client

    conn = read_connection_file()
    client = Client(conn["address"], conn["key"].encode(), conn)
    try:
        deadline = time.monotonic() + timeout
        while any(n["node_id"] == node_id for n in client.status()["nodes"]):
            assert time.monotonic() < deadline, f"the head still lists node {node_id}"
            time.sleep(0.1)
    finally:
        client.close()


def _wait_node_ready(node_id: str, workers: int, timeout: float = 120.0) -> None:
    """Until ``node_id`` has ``workers`` idle workers (asked on a connection of this thread's own)."""
    from raynb.cluster.connection_file import read_connection_file
    from raynb.cluster.protocol.control import Client

    conn = read_connection_file()
    client = Client(conn["address"], conn["key"].encode(), conn)
    try:
        deadline = time.monotonic() + timeout
        while True:
            idle = [
                w for w in client.status()["workers"] if w.get("node_id") == node_id and w["state"] == "idle"
            ]
            if len(idle) >= workers:
                return
            assert time.monotonic() < deadline, f"node {node_id} has {len(idle)} idle workers"
            time.sleep(0.1)
    finally:
        client.close()


@pytest.mark.parametrize("min_workers", [1, 3])
def test_elastic_run_goes_on_when_a_node_leaves(tmp_path, monkeypatch, capsys, min_workers):
    """(min, 4) over two nodes of 2. Node n2 stops mid-run: with min 1 the run goes on at
    once at 2 ranks; with min 3 it waits, saying for what, until n2 comes back."""
    import threading

    flag = tmp_path / "started"
    with private_cluster(tmp_path, monkeypatch, workers=2, max_workers=2) as (info, client, _):
        node = {"proc": _start_node(info, "n2", 2)}
        try:
            _wait_workers(client, 4)

            def leave():
                deadline = time.monotonic() + 60
                while not flag.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                _stop_node(node.pop("proc"))
                if min_workers > 2:
                    _wait_node_gone(info, "n2")  # the head saw it leave: the run now waits
                    time.sleep(3)  # (past the peers' stop grace: the restart is queued, waiting)
                    node["proc"] = _start_node(info, "n2", 2)

            t = threading.Thread(target=leave)
            t.start()
            try:
                result = TorchTrainer(
                    _train,
                    train_loop_config={
                        "epochs": 30,
                        "sleep": 0.25,
                        "flag": str(flag),
                        "victim": -1,
                        "started": str(flag),
                    },
                    scaling_config=ScalingConfig(
                        num_workers=(min_workers, 4), elastic_resize_monitor_interval_s=60
                    ),
                    run_config=RunConfig(
                        verbose=1,
                        storage_path=str(tmp_path / "r"),
                        failure_config=FailureConfig(max_failures=2),
                    ),
                ).fit()
            finally:
                t.join()
        finally:
            if "proc" in node:
                _stop_node(node["proc"])
    out = capsys.readouterr().out
    assert result.state == "FINISHED", result.error
    assert len(result.failures) == 1, result.failures
    rows = result.metrics_dataframe.to_dict("records")
    sizes = [int(r["world_size"]) for r in rows]
    assert sizes[0] == 4, sizes
    later = [r for r in rows if r["resumed_from"] != -1]
    start = int(later[0]["resumed_from"])
    assert [int(r["epoch"]) for r in later] == list(range(start + 1, 30)), rows
    if min_workers == 1:
        assert {int(r["world_size"]) for r in later} == {2}, sizes
        assert "shrank 4 -> 2 ranks (node n2 lost" in out, out
    else:
        assert "2 of min 3 workers free; waiting for 1 more" in out, out
        assert min(int(r["world_size"]) for r in later) >= 3, sizes


def test_xgboost_trainer_takes_an_elastic_num_workers(tmp_path, monkeypatch):
    pytest.importorskip("xgboost")
    import pandas as pd
    from sklearn.datasets import make_classification

    from raynb.train.xgboost import XGBoostTrainer

    X, y = make_classification(n_samples=2000, n_features=8, random_state=0)
    train = pd.DataFrame(X, columns=[f"f{i}" for i in range(8)]).assign(y=y)
    with private_cluster(tmp_path, monkeypatch, workers=2, max_workers=2):
        result = XGBoostTrainer(
            params={"objective": "binary:logistic", "eval_metric": "logloss", "tree_method": "hist"},
            label_column="y",
            num_boost_round=5,
            datasets={"train": train},
            scaling_config=ScalingConfig(num_workers=(1, 4)),
            run_config=RunConfig(verbose=0, storage_path=str(tmp_path / "r")),
        ).fit()
    assert result.state == "FINISHED", result.error
    assert set(result.metrics_dataframe["world_size"]) == {2}
    assert "train-logloss" in result.metrics_dataframe.columns


def test_magic_workers_range_runs_elastic(ip):
    """``%%ray_train --workers 2-4`` on the session cluster's 4 idle workers: an elastic run
    placed on all 4, that reports its world size."""
    from conftest import ok_cell

    ip.user_ns.pop("world", None)
    ok_cell(
        ip,
        "%%ray_train --workers 2-4 --quiet --out world\nworld = get_context().get_world_size()\n"
        "report({'x': 1})\n",
    )
    world = ip.user_ns["world"]
    assert world == 4
    assert list(ip.user_ns["_ray_result"].metrics_dataframe["world_size"]) == [world]
