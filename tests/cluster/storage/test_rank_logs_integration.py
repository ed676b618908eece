"""Rank logs of a real run on a cluster: rank 3's whole output after the run and after a
head restart (the pure tests of the log files are in test_rank_logs.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import cloudpickle
import pytest
from conftest import alive, import_paths

import raynb
from raynb.cluster.storage.rundir import OUTPUT_TAIL_LINES
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

cloudpickle.register_pickle_by_value(sys.modules[__name__])

REPO = str(Path(__file__).resolve().parents[3])
MANY = OUTPUT_TAIL_LINES + 500  # more lines than a run record's tail holds
RUN_AND_READ = """
import json, raynb, sys
sys.path[:0] = {tests!r}
import test_rank_logs_integration as t
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer
r = TorchTrainer(t._chatty, train_loop_config={{"lines": {lines}}}, scaling_config=ScalingConfig(num_workers=4),
                 run_config=RunConfig(name={name!r}, verbose=0)).fit()
print(json.dumps({{"rank3": r.logs(rank=3)}}))
"""
READ_BACK = """
import json, raynb
r = raynb.get_run({name!r})
print(json.dumps({{"state": r.state, "rank3": r.logs(rank=3), "stderr": r.logs(rank=3, stream="stderr")}}))
"""


# -- a real run: rank 3's whole output, after the run and after a head restart -------------
def _chatty(config):
    import sys

    from raynb.train import get_context, report

    rank = get_context().get_world_rank()
    lines = config["lines"] if rank == 3 else 2
    for i in range(lines):
        print(f"rank {rank} line {i}")
    print(f"rank {rank} warning", file=sys.stderr)
    print("progress", end="", flush=True)
    print("...done")
    report({"loss": 1.0})


def _expected_rank3(lines: int) -> str:
    return "".join(f"rank 3 line {i}\n" for i in range(lines)) + "rank 3 warning\nprogress...done\n"


def test_rank3_full_output_after_the_run(warm):
    name = f"logs_{uuid.uuid4().hex[:6]}"
    result = TorchTrainer(
        _chatty,
        train_loop_config={"lines": MANY},
        scaling_config=ScalingConfig(num_workers=4),
        run_config=RunConfig(name=name, verbose=0),
    ).fit()
    assert result.logs(rank=3) == _expected_rank3(MANY)  # all of it, beyond the record's tail
    got = raynb.get_run(name)
    assert got.logs(rank=3) == _expected_rank3(MANY)
    assert got.logs(rank=3, stream="stderr") == "rank 3 warning\n"
    assert got.logs(rank=0) == "rank 0 line 0\nrank 0 line 1\nrank 0 warning\nprogress...done\n"
    assert "(rank 1, stderr) rank 1 warning" in got.logs() and f"(rank 3) rank 3 line {MANY - 1}" in got.logs
    assert len(got.logs) == OUTPUT_TAIL_LINES  # the record's tail stays bounded
    with pytest.raises(ValueError, match="this run has 4 rank"):
        got.logs(rank=4)


def _python(code: str, env: dict) -> dict:
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_rank3_logs_after_a_head_restart(tmp_path, monkeypatch):
    """An own cluster: a run, then `stop` and a new cluster on the same RAYNB_HOME and
    storage; the new head reads the run back and get_run(name).logs(rank=3) is all of it."""
    from raynb.cluster.launch import cluster_pids, start_cluster, stop_cluster

    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RAYNB_STORAGE_PATH", str(tmp_path / "results"))
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    name, lines = "restarted_logs", 300
    pids: list[int] = []
    try:
        info, started = start_cluster(num_workers=4)
        assert started
        pids += cluster_pids(info)
        first = _python(RUN_AND_READ.format(tests=import_paths(__file__), lines=lines, name=name), env)
        assert stop_cluster()
        info2, started2 = start_cluster(num_workers=1)
        assert started2 and info2["token"] != info["token"]
        pids += cluster_pids(info2)
        again = _python(READ_BACK.format(name=name), env)
    finally:
        stop_cluster()
        deadline = time.monotonic() + 10
        while alive(pids) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert not alive(pids)
    assert first["rank3"] == _expected_rank3(lines)
    assert again == {"state": "FINISHED", "rank3": _expected_rank3(lines), "stderr": "rank 3 warning\n"}
