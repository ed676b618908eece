"""Elastic resizes on a real cluster: a grow stops the ranks at a committed checkpoint, each
resize is a note, a restored elastic run stays elastic (the report gate's decisions, driven by
hand, are in test_elastic_resize.py)."""

from __future__ import annotations

import re
import sys
import threading
import time

import cloudpickle
from conftest import private_cluster

from raynb.train import FailureConfig, RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- real runs ----------------------------------------------------------------------
def _train(config):
    """Epochs of ``sleep`` s, each a checkpoint; an all_reduce at each attempt's start.
    Each epoch's start is marked (``<marks>/<world>_<epoch>``), so a test sees an epoch
    begun and never reported (an attempt stopped mid-epoch)."""
    import json
    import os
    import tempfile
    import time

    import torch
    import torch.distributed as dist

    from raynb.train import Checkpoint, get_checkpoint, get_context, report

    ctx = get_context()
    world, rank = ctx.get_world_size(), ctx.get_world_rank()
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == world
    start = 0
    ck = get_checkpoint()
    if ck is not None:
        with ck.as_directory() as d, open(os.path.join(d, "state.json")) as f:
            start = json.load(f)["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        if rank == 0:
            open(os.path.join(config["marks"], f"{world}_{epoch}"), "w").close()
        hold = config.get("hold_until")
        if hold and epoch == 3 and world < 4:
            deadline = time.monotonic() + 120  # a node agent's start on a busy machine
            while not os.path.exists(hold) and time.monotonic() < deadline:
                time.sleep(0.05)
        if config.get("victim") == rank and epoch == 2 and not os.path.exists(config["flag"]):
            open(config["flag"], "w").close()
            os._exit(3)
        time.sleep(config.get("sleep", 0.05))
        if config.get("checkpoints", True):
            with tempfile.TemporaryDirectory() as d:
                if rank == 0:
                    with open(os.path.join(d, "state.json"), "w") as f:
                        json.dump({"epoch": epoch}, f)
                report({"epoch": epoch, "pid": os.getpid()}, checkpoint=Checkpoint.from_directory(d))
        else:
            report({"epoch": epoch, "pid": os.getpid()})
        if config.get("started") and epoch == 1:
            open(config["started"], "a").close()


def _wait_node_listed(node_id: str, timeout: float = 120.0) -> None:
    """Until the head lists ``node_id`` (asked on a connection of this thread's own)."""
    from raynb.cluster.connection_file import read_connection_file
    from raynb.cluster.protocol.control import Client

    conn = read_connection_file()
    client = Client(conn["address"], conn["key"].encode(), conn)
    try:
        deadline = time.monotonic() + timeout
        while all(n["node_id"] != node_id for n in client.status()["nodes"]):
            assert time.monotonic() < deadline, f"the head does not list node {node_id}"
            time.sleep(0.05)
    finally:
        client.close()


def test_grow_stops_the_ranks_at_a_report_and_says_what_and_how_long(tmp_path, monkeypatch, capsys):
    """(1, 4) on a node of 2; a node of 2 more joins. The grow stops the two ranks inside the
    report that committed a checkpoint: no epoch begun at 2 ranks is abandoned, the two warm
    workers (not killed) are ranks of the 4-rank attempt, and the note names the node and
    the time taken."""
    from test_elastic_integration import _start_node, _stop_node

    marks, flag, ready = tmp_path / "marks", tmp_path / "started", tmp_path / "n2-ready"
    marks.mkdir()
    with private_cluster(tmp_path, monkeypatch, workers=2, max_workers=2) as (info, client, _):
        node = {}

        def join():
            deadline = time.monotonic() + 60
            while not flag.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            node["proc"] = _start_node(info, "n2", 2)
            # Until the head lists n2 (its room to fork counts), not until its workers are
            # up: on a loaded machine that takes longer than two intervals, and a run held
            # that long is stopped by a cancel, mid-epoch.
            _wait_node_listed("n2")
            ready.touch()

        t = threading.Thread(target=join)
        t.start()
        try:
            result = TorchTrainer(
                _train,
                train_loop_config={
                    "epochs": 30,
                    "sleep": 0.3,
                    "marks": str(marks),
                    "started": str(flag),
                    "hold_until": str(ready),
                    "flag": str(tmp_path / "f"),
                },
                # Longer than the hold at epoch 3 (until the head lists n2) lasts: a run
                # that reports nothing for two intervals is stopped by a cancel instead.
                scaling_config=ScalingConfig(num_workers=(1, 4), elastic_resize_monitor_interval_s=5),
                run_config=RunConfig(verbose=1, storage_path=str(tmp_path / "r")),
            ).fit()
        finally:
            t.join()
            if "proc" in node:
                _stop_node(node["proc"])
    out = capsys.readouterr().out
    assert result.state == "FINISHED", result.error
    assert not result.failures, result.failures
    rows = result.metrics_dataframe.to_dict("records")
    assert "world_size" in result.metrics_dataframe.columns
    small = [r for r in rows if r["world_size"] == 2]
    big = [r for r in rows if r["world_size"] == 4]
    assert small and big and [int(r["epoch"]) for r in small + big] == list(range(30)), rows
    # Stopped inside report(): every epoch begun at 2 ranks was reported (none redone at 4).
    begun_small = sorted(int(p.name.split("_")[1]) for p in marks.glob("2_*"))
    assert begun_small == [int(r["epoch"]) for r in small], (begun_small, rows, out)
    # Not killed: rank 0 of the 2-rank attempt is a rank of the 4-rank one, the same process.
    assert int(small[-1]["pid"]) in {int(r["pid"]) for r in big}, rows
    m = re.search(r"grew 2 -> 4 ranks \(node n2 joined\); resumed from checkpoint_\d+ in (\d+\.\d) s", out)
    assert m, out
    live = out.split("] FINISHED")[0]
    assert "warning: this elastic run has saved no checkpoint" not in live, out


def test_a_run_without_checkpoints_is_warned_once(tmp_path, monkeypatch, capsys):
    """(1, 3) on 2 warm workers with room for 3 (it starts on 3), no checkpoints; rank 2
    exits mid-run and, the node back at its warm count, is not replaced: the run shrinks to
    the 2 left, starting over, and is warned once that each resize restarts it."""
    with private_cluster(tmp_path, monkeypatch, workers=2, max_workers=3):
        result = TorchTrainer(
            _train,
            train_loop_config={
                "epochs": 4,
                "sleep": 0.2,
                "marks": str(tmp_path),
                "victim": 2,
                "flag": str(tmp_path / "f"),
                "checkpoints": False,
            },
            scaling_config=ScalingConfig(num_workers=(1, 3)),
            run_config=RunConfig(
                verbose=1, storage_path=str(tmp_path / "r"), failure_config=FailureConfig(max_failures=1)
            ),
        ).fit()
    out = capsys.readouterr().out
    assert result.state == "FINISHED", result.error
    live = out.split("] FINISHED")[0]
    assert live.count("warning: this elastic run has saved no checkpoint") == 1, out
    assert "report one (report(metrics, checkpoint=" in live, out
    assert re.search(r"shrank 3 -> 2 ranks \(rank 2 exited with code 3\); started over in \d+\.\d s", live), (
        out
    )
    rows = result.metrics_dataframe.to_dict("records")
    assert [int(r["epoch"]) for r in rows if r["world_size"] == 2] == [0, 1, 2, 3], rows


def test_a_restored_elastic_run_stays_elastic(tmp_path, warm):
    """``TorchTrainer.restore`` of a (1, 4) run gives it (1, 4) and its interval again, not
    the world size its last attempt had; it resumes from its checkpoint, elastic."""
    config = {"epochs": 2, "marks": str(tmp_path), "flag": str(tmp_path / "f")}
    first = TorchTrainer(
        _train,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=(1, 4), elastic_resize_monitor_interval_s=7),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path / "r"), name="elastic-restore"),
    ).fit()
    assert first.state == "FINISHED", first.error
    trainer = TorchTrainer.restore(first.path, train_loop_config={**config, "epochs": 3})
    sc = trainer.scaling_config
    assert sc.elasticity_enabled and (sc.min_workers, sc.max_workers) == (1, 4), sc
    assert sc.elastic_resize_monitor_interval_s == 7
    again = trainer.fit()
    assert again.state == "FINISHED", again.error
    rows = again.metrics_dataframe.to_dict("records")
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2] and rows[-1]["world_size"] >= 1, rows


def test_ray_train_resume_of_an_elastic_run_stays_elastic(ip):
    """``%%ray_train --resume`` of a ``--workers 1-4`` run runs it elastic again: its reports
    carry world_size, and run.json keeps (1, 4)."""
    import json
    import os
    import uuid

    from conftest import ok_cell

    name = f"elastic_{uuid.uuid4().hex[:6]}"
    cell = "report({'x': 1})\n"
    ok_cell(ip, f"%%ray_train --workers 1-4 --quiet --name {name}\n{cell}")
    ok_cell(ip, f"%%ray_train --resume --quiet --name {name}\n{cell}")
    result = ip.user_ns["_ray_result"]
    assert result.state == "FINISHED", result.error
    assert list(result.metrics_dataframe["world_size"]) == [4, 4]  # both runs' reports, elastic
    with open(os.path.join(result.path, "run.json")) as f:
        record = json.load(f)
    assert (record["min_workers"], record["max_workers"]) == (1, 4), record
