"""A node agent on the head's own machine whose process exits is lost at the head's next
scan of its nodes (raynb/cluster/head/node_exits.py), not after the heartbeat timeout; a
node whose pid the head cannot vouch for (another machine, another pid namespace) is left
to its heartbeats."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import psutil
from conftest import private_cluster

from raynb.cluster.head.node_exits import NodeExits, this_machine

HERE = "boot:1"


def _node(pid: int, shm_id: str = HERE, node_id: str = "n2"):
    return SimpleNamespace(node_id=node_id, pid=pid, shm_id=shm_id)


def _agent_like():
    """A live process whose command line names raynb, as a node agent's does (once it has
    exec'd: an agent registers long after)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "raynb-node-stand-in"])
    deadline = time.monotonic() + 10
    while "raynb-node-stand-in" not in psutil.Process(proc.pid).cmdline():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc


def test_an_agent_on_this_machine_that_exits_is_found_at_once():
    exits = NodeExits(machine=HERE)
    proc = _agent_like()
    try:
        node = _node(proc.pid)
        assert exits.watch(node)
        assert exits.exited([node]) == []  # alive: nothing to say
        proc.kill()
        proc.wait()
        [(lost, why)] = exits.exited([node])
        assert lost is node and f"node agent (pid {proc.pid}) on this machine exited" in why
        assert exits.exited([node]) == []  # said once
    finally:
        proc.kill()
        proc.wait()


def test_a_zombie_agent_counts_as_exited():
    exits = NodeExits(machine=HERE)
    proc = _agent_like()
    node = _node(proc.pid)
    assert exits.watch(node)
    proc.kill()
    deadline = time.monotonic() + 10
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    try:
        assert [n for n, _ in exits.exited([node])] == [node]
    finally:
        proc.wait()


def test_nodes_the_head_cannot_vouch_for_are_left_to_their_heartbeats():
    exits = NodeExits(machine=HERE)
    proc = _agent_like()
    try:
        assert not exits.watch(_node(proc.pid, shm_id="another-machine"))  # its pid means nothing here
        assert not exits.watch(_node(1))  # pid 1 here is no raynb agent
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        assert not exits.watch(_node(gone.pid))  # not a live process here when it registered
        assert not NodeExits(machine="").watch(_node(proc.pid, shm_id=""))
    finally:
        proc.kill()
        proc.wait()


def test_a_node_registered_again_or_forgotten_is_no_longer_watched():
    exits = NodeExits(machine=HERE)
    proc = _agent_like()
    try:
        assert exits.watch(_node(proc.pid))
        proc.kill()
        proc.wait()
        assert exits.exited([_node(proc.pid + 1)]) == []  # n2 is now another agent (a new pid)
        assert exits.exited([]) == []
    finally:
        proc.kill()
        proc.wait()


def test_this_machine_is_what_a_node_agent_reports():
    from raynb.cluster.node.shm import shm_id

    assert this_machine() == shm_id() != ""


def _start_node(info: dict, node_id: str) -> subprocess.Popen:
    from raynb.cluster.connection_file import connection_file_path

    return subprocess.Popen(
        [sys.executable, "-m", "raynb.cli", "node", "--address", info["address"], "--key-file",
         str(connection_file_path()), "--workers", "1", "--max-workers", "1", "--node-id", node_id],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: killed whole, as a host that dies
    )  # fmt: skip


def _until(condition, what: str, timeout: float) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, f"no {what} within {timeout} s"
        time.sleep(0.05)
    return time.monotonic() - start


def test_a_killed_node_agent_is_lost_long_before_its_heartbeat_timeout(tmp_path, monkeypatch):
    from raynb.cluster.node.host import remove_stale_workers_tmp

    # Heartbeats alone would take 60 s here: only the watch of its process can say it sooner.
    env = {"RAYNB_NODE_TIMEOUT_S": "60"}
    with private_cluster(tmp_path, monkeypatch, workers=1, env=env) as (info, client, _):
        proc = _start_node(info, "n2")
        try:
            _until(lambda: any(n["node_id"] == "n2" for n in client.status()["nodes"]), "node n2", 120)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            remove_stale_workers_tmp()  # the killed agent's workers' temp dir
        took = _until(lambda: all(n["node_id"] != "n2" for n in client.status()["nodes"]), "loss of n2", 30)
        with open(os.path.join(os.environ["RAYNB_HOME"], "logs", "head.log")) as f:
            log = f.read()
    assert f"node agent (pid {proc.pid}) on this machine exited" in log, log[-2000:]
    assert took < 30
