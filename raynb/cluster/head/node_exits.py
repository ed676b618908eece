"""A node agent on the head's own machine whose process exited: lost at the next scan of
the nodes, not after the heartbeat timeout.

A node agent started beside the head (``raynb node`` on the same host, a second agent in
a network namespace, a test's or a notebook's extra node) and SIGKILLed, or killed with
its process group, sends nothing more: by heartbeats alone the head would wait
``RAYNB_NODE_TIMEOUT_S`` (5 s) to say so, and an elastic run would wait as long to shrink.
On the same machine the head can look: the agent's pid is gone (or a zombie), or is now
another process (its start time changed).

It is used only where that look means something: the node reports the head's own
``/dev/shm`` id (same kernel boot, same tmpfs) and, when it registered, its pid was a
live process here whose command line names raynb (so a node in a container with a pid
namespace of its own, whose pid means another process here or none, is never judged by
it). Every other node, slow or far, is judged by its heartbeats alone, as before.
"""

from __future__ import annotations

import os

import psutil


def this_machine() -> str:
    """This process's ``/dev/shm`` id, as a node agent reports its own (``<boot id>:<st_dev>``
    of ``/dev/shm``, ``cluster.node.shm.shm_id``); "" when it cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}:{os.stat('/dev/shm').st_dev}"
    except OSError:
        return ""


def _agent_started(pid: int) -> float | None:
    """The start time of process ``pid`` when it is a live raynb process here, else None."""
    try:
        proc = psutil.Process(pid)
        if "raynb" not in " ".join(proc.cmdline()) or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except psutil.Error:
        return None


def _exited(pid: int, started: float) -> bool:
    """Whether the process ``pid`` that started at ``started`` is gone (or a zombie)."""
    try:
        proc = psutil.Process(pid)
        return proc.create_time() != started or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False  # cannot look (permissions): the heartbeats decide


class NodeExits:
    """The node agents on this machine whose process the head can watch."""

    def __init__(self, machine: str | None = None):
        self.machine = this_machine() if machine is None else machine
        self._watched: dict[str, tuple[int, float]] = {}  # node id -> (agent pid, its start time)

    def watch(self, node) -> bool:
        """Watch ``node`` (a registry ``NodeInfo``, just registered) when its agent runs on
        this machine; returns whether it is watched."""
        self._watched.pop(node.node_id, None)
        if not self.machine or node.shm_id != self.machine:
            return False
        started = _agent_started(node.pid)
        if started is None:
            return False
        self._watched[node.node_id] = (node.pid, started)
        return True

    def exited(self, nodes) -> list[tuple[object, str]]:
        """``(node, why)`` for each watched one of ``nodes`` (``NodeInfo``) whose agent has
        exited; those and the nodes no longer listed stop being watched."""
        listed = {node.node_id: node for node in nodes}
        found = []
        for node_id, (pid, started) in list(self._watched.items()):
            node = listed.get(node_id)
            if node is None or node.pid != pid:
                del self._watched[node_id]
            elif _exited(pid, started):
                del self._watched[node_id]
                found.append((node, f"lost: its node agent (pid {pid}) on this machine exited"))
        return found
