"""The head's worker pool: keeping each node at its warm worker count, retiring the
extra workers forked for big or concurrent runs once they sat idle, and telling
who is not responding.

- **Refill**: a node that lost a worker (it died, or its zygote did) is asked for a
  new one until it holds its warm count (``num_workers``) again.
- **Retire**: a run that needs more workers than are idle gets more forked (see
  ``scheduler.Fork``), up to the node's ``max_workers``. Those beyond the warm count
  that stayed idle ``idle_timeout_s`` are retired (``retire_worker`` to their node
  agent: SIGTERM, a clean exit for an idle worker), the ones in no process group
  first, then the newest. Never a busy worker, never below the warm count, never
  while a run waits in the queue (it may need them).
- **Threads**: a rank's torch threads are its node's cores over the ranks busy there
  (at least 1): given at its start (``run_task``), updated (``set_threads``) when
  that count changes, applied by the worker (``thread_share``). A running rank's
  share shrinks at once, but grows only into cores that other work leaves idle
  (:func:`room`): on a node oversubscribed by other processes, two OpenMP threads
  wait on each other's descheduled slices and run slower than one.
- **Not responding**: a worker whose process is stopped (SIGSTOP, a debugger: the
  node agent's sample says so) or that sent nothing, not even its I/O thread's
  heartbeat, for ``WORKER_SILENCE_S`` (a hang holding the GIL) is marked, in
  ``raynb status`` and with a note to its run's pane; another note when it is back.
"""

from __future__ import annotations

import logging
import os
from typing import Callable

from ..protocol import messages
from .node_pace import idle_heartbeat_s
from .registry import Registry, WorkerInfo

log = logging.getLogger("raynb.head")

DEFAULT_IDLE_TIMEOUT_S = 60.0
IDLE_TIMEOUT_ENV = "RAYNB_WORKER_IDLE_TIMEOUT_S"
# A worker's I/O thread sends a heartbeat every second while it runs a task
# (worker.head_link.HEARTBEAT_S), every $RAYNB_IDLE_HEARTBEAT_S between tasks.
WORKER_SILENCE_S = 5.0


def idle_timeout_s(value: str | float | None = None) -> float:
    """The idle time (s) after which extra workers are retired: ``value`` if given, else
    ``$RAYNB_WORKER_IDLE_TIMEOUT_S``, else 60.

    Raises:
        ValueError: not a number of seconds >= 0 (the message names where it came from).
    """
    source = "the idle timeout (--idle-timeout, idle_timeout_s)"
    if value is None:
        value, source = os.environ.get(IDLE_TIMEOUT_ENV), IDLE_TIMEOUT_ENV
        if value in (None, ""):
            return DEFAULT_IDLE_TIMEOUT_S
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(
            f"{source} must be a number of seconds >= 0 (how long a worker beyond "
            f"the warm count may stay idle before it is retired), got {value!r}"
        )
    return seconds


# What a worker's sample carries to `raynb status` and the pane (the GPU fields only where
# NVML sees the worker on a GPU: see cluster/node/gpu_stats.py).
STAT_FIELDS = ("cpu_percent", "rss", "gpu", "gpu_util", "gpu_mem_used", "gpu_mem_total")


class WorkerPool:
    """Args:
    registry: the head's nodes and workers.
    send: ``send(identity, msg_type, content)`` on the head's socket.
    note: ``note(run_id, text)``: a note for the pane of a run, if it is live.
    idle_timeout_s: see :func:`idle_timeout_s`.
    """

    def __init__(
        self,
        registry: Registry,
        send: Callable,
        note: Callable[[str, str], None],
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    ):
        self.registry, self._send, self._note = registry, send, note
        self.idle_timeout_s = idle_timeout_s
        self.idle_beat_s = idle_heartbeat_s()  # an idle worker's heartbeat interval (s)
        # The registry's version at the last search for workers to retire, and when a worker
        # then chosen is due: until either changes, tick skips the search.
        self._searched_at, self._next_retire = -1, 0.0

    # -- keeping the warm count ---------------------------------------------------
    def refill(self, node_id: str | None) -> None:
        """Replace the node's dead workers from its zygote, up to its warm count."""
        missing = self.registry.missing_workers(node_id)
        if missing:
            node = self.registry.nodes[node_id]
            self._send(node.identity, messages.SPAWN_WORKERS, self.registry.asked(node, missing))

    def tick(self, now: float, runs_waiting: bool) -> list[str]:
        """Note when the workers that became idle since the last tick did, update the thread
        shares of the nodes whose busy count changed, retire those idle too long beyond the
        warm count. Only what changed is looked at (``Registry.take_changes``), and the search
        for workers to retire runs when something changed or the next one is due: a tick
        (up to 200 a second while messages arrive) costs the same whatever the cluster's size.
        Returns the nodes whose count of busy workers changed (``node_pace``)."""
        changed, nodes = self.registry.take_changes()
        for w in changed:
            if not w.busy and w.idle_since is None:
                w.idle_since, w.threads, w.cpus = now, None, None
        for node_id in nodes:
            self._share_threads(node_id, [w for w in self.registry.workers_of(node_id) if w.busy])
        if runs_waiting:
            return nodes
        if self.registry.version == self._searched_at and now < self._next_retire:
            return nodes
        for w in self.retirable(now):
            self.retire(w, now)
        return nodes

    def reshare(self, node_id: str) -> None:
        """After a node's load changed (``node_stats``): grow the shares a busy node held
        back while its cores were taken by other work, once they are idle."""
        self._share_threads(node_id, [w for w in self.registry.workers_of(node_id) if w.busy])

    def _share_threads(self, node_id: str, busy: list[WorkerInfo]) -> None:
        share = self.registry.thread_share(node_id)
        if share is None:
            return
        idle = room(self.registry, node_id)
        for w in busy:
            if w.cpus or w.threads is None:
                continue  # its run asked for its CPUs: its threads stay as many
            n = share if share <= w.threads else min(share, max(w.threads, idle))
            if n != w.threads:
                w.threads = n
                self._send(
                    w.identity,
                    messages.SET_THREADS,
                    {"run_id": w.run_id, "attempt": w.attempt, "num_threads": n},
                )

    def retirable(self, now: float) -> list[WorkerInfo]:
        """Of each node's idle workers, as many as it holds beyond its warm count, chosen
        of a kind other than torch first, ungrouped next, then the newest (the original
        warm ones stay, with their process group): those of them idle for the timeout. An
        older idle worker is not taken for a newer one that is not idle long enough yet.
        Notes when the next one is due."""
        grouped: set | None = None
        out, due = [], float("inf")
        for node in self.registry.nodes_beyond_warm():  # not every node, on every tick
            extra = self.registry.workers_on(node.node_id) - node.num_workers
            if extra <= 0 or node.spawning:
                continue
            mine = self.registry.workers_of(node.node_id)  # in the order they joined
            if grouped is None:  # built only when some node holds extra workers
                grouped = {wid for members in self.registry.groups for wid in members}
            idle = sorted(
                (i for i, w in enumerate(mine) if not w.busy and w.idle_since is not None),
                # Workers of another kind (TensorFlow's) first: the warm count is torch's.
                key=lambda i: (mine[i].kind == "torch", mine[i].worker_id in grouped, -i),
            )
            for w in (mine[i] for i in idle[:extra]):
                if now - w.idle_since >= self.idle_timeout_s:
                    out.append(w)
                else:
                    due = min(due, w.idle_since + self.idle_timeout_s)
        # Until then, and while nothing changes, no other choice can come out of this.
        self._searched_at, self._next_retire = self.registry.version, due
        return out

    def retire(self, w: WorkerInfo, now: float) -> None:
        node = self.registry.nodes.get(w.node_id)
        log.info(
            "retiring worker %s (pid %d): idle %.0fs, beyond node %s's %d warm workers",
            w.worker_id,
            w.pid,
            now - w.idle_since,
            w.node_id,
            node.num_workers,
        )
        self.registry.remove_worker(w.worker_id)  # never scheduled again; its exit comes later
        self._send(node.identity, messages.RETIRE_WORKER, {"worker_id": w.worker_id})

    def free_data(self, key: str) -> None:
        """Every node removes its shared-memory segments of ``key`` (a run's id when the run
        ended, an experiment's on ``release_data``): see ``cluster.shm``. Only those that
        hosted a worker: segments are made for a node's ranks (or, on a one-node cluster, by
        the client for them), and a message to each of 1,000 idle nodes made every run's end
        cost the head in proportion to the cluster's size."""
        for node in self.registry.nodes.values():
            if node.hosted:
                self._send(node.identity, messages.FREE_DATA, {"key": key})

    # -- the node agents' samples -------------------------------------------------
    def observe(self, content: dict, now: float) -> dict[str, dict]:
        """Take a node's ``node_stats``; returns the stats of each live run's ranks there,
        ``{run_id: {rank: {"pid", "cpu_percent", "rss", and where NVML sees the rank on a
        GPU "gpu", "gpu_util", "gpu_mem_used", "gpu_mem_total"}}}``, for the panes."""
        node = self.registry.nodes.get(content.get("node_id"))
        if node is not None:
            node.zygote_pid, node.note = content.get("zygote_pid"), content.get("note")
        by_run: dict[str, dict] = {}
        for wid, st in content.get("workers", {}).items():
            w = self.registry.workers.get(wid)
            if w is None:
                continue
            w.stats = {k: st.get(k) for k in STAT_FIELDS if k in st or k in ("cpu_percent", "rss")}
            self._responding(w, _why_not_responding(w, st, now, self.idle_beat_s))
            if w.run_id is not None:
                by_run.setdefault(w.run_id, {})[w.rank] = {"pid": w.pid, **w.stats}
        return by_run

    def _responding(self, w: WorkerInfo, why: str | None) -> None:
        was = w.not_responding
        w.not_responding = why
        if (was is None) == (why is None):
            return
        who = f"worker {w.worker_id} (pid {w.pid} on {w.hostname})"
        if w.run_id is not None:
            who = f"rank {w.rank} (pid {w.pid} on {w.hostname})"
        if why is not None:
            log.warning("%s is not responding: %s", who, why)
            text = f"{who} is not responding: {why}"
        else:
            log.info("%s responds again", who)
            text = f"{who} responds again"
        if w.run_id is not None:
            self._note(w.run_id, text)


def room(registry: Registry, node_id: str) -> int:
    """Cores of ``node_id`` that other work than raynb's leaves idle, from its last 1-minute
    load average: the load beyond what raynb's own workers there can make (at most one
    runnable thread a core, or one a worker) is other processes'. All of its cores while
    the node reported no load."""
    node = registry.nodes.get(node_id)
    if node is None or not node.cpus or node.load is None:
        return node.cpus if node is not None else 0
    own = max(node.cpus, len(registry.workers_of(node_id)))
    return node.cpus - int(max(0.0, node.load - own))


def _why_not_responding(w: WorkerInfo, st: dict, now: float, idle_s: float = 1.0) -> str | None:
    if st.get("frozen"):
        return "its process is stopped (SIGSTOP, or a debugger holds it); SIGCONT resumes it"
    silent = now - w.last_seen
    # An idle worker beats every $RAYNB_IDLE_HEARTBEAT_S (worker.head_link): as many
    # missed heartbeats; one running a task beats every second again.
    if silent > WORKER_SILENCE_S * (1.0 if w.run_id is not None else idle_s):
        return f"no message from it, not even its heartbeat, for {silent:.0f}s (a hang that holds the GIL?)"
    return None
