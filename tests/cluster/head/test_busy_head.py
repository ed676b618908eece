"""A busy head is not a dead head: node agents keep their workers through a stalled head
(SIGSTOP past the old 4 s limit), end them once the head is gone (SIGKILL), and a local
node agent that keeps exiting is named as the cause, never "no node"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
from conftest import alive, private_cluster

import raynb
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

STALL_S = 6.0  # longer than the 4 s after which an agent used to give its head up


def _sleepy(config):
    for i in range(config["steps"]):
        time.sleep(config["sleep"])
        raynb.train.report({"i": i})
    return "ok"


def _extra_agent(info, tmp_path, node_id: str) -> subprocess.Popen:
    """A node agent as another host would run one: no head pid, not the head's child."""
    env = dict(os.environ, RAYNB_KEY=info["key"])
    with open(tmp_path / f"{node_id}.log", "wb") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "raynb.cluster.node.agent",
                "--address",
                info["address"],
                "--workers",
                "1",
                "--max-workers",
                "1",
                "--node-id",
                node_id,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def _workers(client) -> dict[str, int]:
    return {w["worker_id"]: w["pid"] for w in client.status()["workers"]}


def test_agents_keep_their_workers_through_a_stalled_head(tmp_path, monkeypatch):
    with private_cluster(tmp_path, monkeypatch, workers=1) as (info, client, pids):
        extra = _extra_agent(info, tmp_path, "extra")
        try:
            before = _wait(lambda: len(w := _workers(client)) == 2 and w, 60, "two workers")
            head = psutil.Process(info["pids"]["head"])

            def stall():
                head.suspend()
                time.sleep(STALL_S)
                head.resume()

            timer = threading.Timer(1.5, stall)  # while a run is on a rank
            timer.start()
            result = TorchTrainer(
                _sleepy,
                train_loop_config={"steps": 20, "sleep": 0.5},
                scaling_config=ScalingConfig(num_workers=1),
                run_config=RunConfig(name="through_stall", verbose=0),
            ).fit()
            timer.join()
            assert result.state == "FINISHED" and result.error is None, result.error
            assert result.metrics["i"] == 19
            assert all(psutil.pid_exists(pid) for pid in before.values()), before
            assert extra.poll() is None, (tmp_path / "extra.log").read_text()
            assert _workers(client) == before  # the same workers: none ended, none replaced
            nodes = {n["node_id"] for n in client.status()["nodes"]}
            assert nodes == {"local", "extra"}
            again = TorchTrainer(
                _sleepy,
                train_loop_config={"steps": 2, "sleep": 0.01},
                scaling_config=ScalingConfig(num_workers=2),
                run_config=RunConfig(verbose=0),
            ).fit()
            assert again.state == "FINISHED", again.error
            log = (tmp_path / "home" / "logs" / "head.log").read_text()
            assert "the head's loop stalled" in log, log[-3000:]
            assert "is not responding" not in log and "lost: no heartbeat" not in log, log[-3000:]
            assert "no word from the head" not in (tmp_path / "home" / "logs" / "node-local.log").read_text()
            st = client.status()
            assert st["loop"]["stalls"] >= 1 and st["loop"]["longest_stall_s"] >= STALL_S - 1
        finally:
            extra.terminate()
            extra.wait(10)


def test_agents_end_their_workers_when_the_head_is_killed(tmp_path, monkeypatch):
    with private_cluster(tmp_path, monkeypatch, workers=1) as (info, client, pids):
        extra = _extra_agent(info, tmp_path, "extra")
        try:
            workers = _wait(lambda: len(w := _workers(client)) == 2 and w, 60, "two workers")
            agents = [info["pids"]["node"], extra.pid]
            os.kill(info["pids"]["head"], signal.SIGKILL)
            t = time.monotonic()
            _wait(lambda: not alive(set(workers.values())), 20, "the workers to end")
            ended = time.monotonic() - t
            assert extra.wait(20) == 1
            _wait(lambda: not alive({agents[0]}), 10, "the local agent to exit")
            assert ended < 15
            log = (tmp_path / "extra.log").read_text()
            assert "the connection to the head closed" in log, log[-2000:]
        finally:
            if extra.poll() is None:
                extra.kill()
                extra.wait()


def test_a_local_node_agent_that_keeps_exiting_is_named_as_the_cause(tmp_path, monkeypatch):
    with private_cluster(tmp_path, monkeypatch, workers=1) as (info, client, pids):
        killed = set()
        for _ in range(4):  # the head restarts it 3 times a minute, then gives up
            pid = _wait(
                lambda: next(
                    (
                        n["pid"]
                        for n in client.status()["nodes"]
                        if n["node_id"] == "local" and n["pid"] not in killed
                    ),
                    None,
                ),
                60,
                "the local node agent",
            )
            killed.add(pid)
            os.kill(pid, signal.SIGKILL)
        st = _wait(lambda: (s := client.status())["local_node"]["gave_up"] and s, 30, "the head to give up")
        assert (
            "keeps exiting" in st["local_node"]["gave_up"] and "node-local.log" in st["local_node"]["gave_up"]
        )
        from raynb.client.status import format_status

        assert "LOCAL NODE AGENT DOWN: the local node agent keeps exiting" in format_status(st)
        with pytest.raises(ValueError, match="the local node agent keeps exiting.*node-local.log"):
            TorchTrainer(
                _sleepy,
                train_loop_config={"steps": 1, "sleep": 0},
                scaling_config=ScalingConfig(num_workers=1),
                run_config=RunConfig(verbose=0),
            ).fit()
