"""Runs waiting for workers, in order, and carrying out the scheduler's answers.

Each :meth:`RunQueue.schedule` pass asks the (pure) scheduler where the run at the
front goes, then does what it said: start its ranks (a ``run_task`` to each
worker, with its ranks and the process group to form), fork more workers on the
nodes it names, or wait. FIFO: the first run that cannot start blocks the rest.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Callable

from .. import settings
from ..protocol import messages
from . import elastic, scheduler
from .controller import RunController
from .registry import Registry, WorkerInfo
from .run import Run


def replacement_wait_s() -> float:
    """How long a restarted run that the remaining nodes cannot hold waits for a node
    with room to join (``$RAYNB_REPLACEMENT_WAIT_S``, seconds; default 300)."""
    return settings.get("RAYNB_REPLACEMENT_WAIT_S")  # NaN, negative or garbage: the default


class RunQueue:
    """Args:
    registry: the head's nodes and workers.
    runs: the head's runs by id (the store's dict).
    send: ``send(identity, msg_type, content, buffers)`` on the head's socket.
    emit: ``emit(run, event)`` to the run's clients.
    controller: told when a run is placed.
    """

    def __init__(
        self,
        registry: Registry,
        runs: dict,
        send: Callable,
        emit: Callable,
        controller: RunController,
        send_each: Callable,
    ):
        self._registry, self._runs = registry, runs
        self._send, self._emit, self._controller = send, emit, controller
        # send_each(msg_type, [(identity, content)], buffers): a run's tasks, all signed
        # before the first goes out, so its ranks get them (and start) close together.
        self._send_each = send_each
        self._ids: list[str] = []  # pending run ids, FIFO
        self._ports: dict[str, int] = {}  # group key -> the master port it was given
        self.gate = None  # head/data_gate.DataGate: a placed attempt waits for its shared data
        # Elastic runs grow at the controller's tick when room appears (head/elastic.py).
        controller.grow_monitor = elastic.GrowMonitor(registry, controller.resize, emit, gate=self._gate)

    def _gate(self, run: Run, content: dict) -> None:
        """A ``report_gate`` to each rank of the run's attempt (head/elastic.GrowMonitor)."""
        content = {"run_id": run.run_id, "attempt": run.attempt, **content}
        for wid in run.ranks:
            w = self._registry.workers.get(wid)
            if w is not None:
                self._send(w.identity, messages.REPORT_GATE, content)

    def add(self, run: Run, front: bool = False) -> None:
        """Queue a run (``front``: a restart goes before the runs that came after it)."""
        self._ids.insert(0 if front else len(self._ids), run.run_id)

    def discard(self, run: Run) -> None:
        if run.run_id in self._ids:
            self._ids.remove(run.run_id)

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def schedule(self) -> None:
        """Start what can start, in order; the first run that cannot blocks the rest."""
        while self._ids:
            run = self._runs.get(self._ids[0])
            if run is None or run.state != "PENDING":  # ended while queued (its files failed)
                self._ids.pop(0)
                continue
            decision = scheduler.place(
                elastic.request(run.spec, now="_restart" in run.spec), self._registry.snapshot()
            )
            if isinstance(decision, scheduler.Fork):
                if not self._fork(run, decision):
                    continue  # it waited too long for room: failed, the next run's turn
                return
            if isinstance(decision, scheduler.Wait):
                return  # GPUs busy with another run: wait for it
            self._ids.pop(0)
            self._start(run, decision)

    def _fork(self, run: Run, decision: scheduler.Fork) -> bool:
        """Fork more workers when a run needs more than are idle (never a silent wait).
        False when a restarted run waited past ``replacement_wait_s()`` for room: it failed."""
        if decision.unplaceable > 0 and run.attempt > 0:
            since = run.spec.setdefault("_no_room_since", time.monotonic())
            waited, limit = time.monotonic() - since, replacement_wait_s()
            if not run.spec.get("_no_room_noted"):
                run.spec["_no_room_noted"] = True
                self._emit(
                    run,
                    {
                        "kind": "note",
                        "text": (
                            f"waiting up to {limit:.0f}s (RAYNB_REPLACEMENT_WAIT_S) for a node with room for "
                            f"{decision.unplaceable} more worker(s): the remaining nodes cannot hold "
                            f"{run.spec.get('min_workers') or run.world_size} ranks"
                        ),
                    },
                )
            if waited >= limit:
                self._ids.pop(0)
                self._controller.no_room(
                    run,
                    (
                        f"the restarted run needs {run.spec.get('min_workers') or run.world_size} workers; "
                        f"the remaining nodes hold at most "
                        f"{self._registry.capacity()} and no node with room joined within {limit:.0f}s "
                        "(RAYNB_REPLACEMENT_WAIT_S); add a node with `raynb node --address ...`"
                    ),
                )
                return False
        else:
            run.spec.pop("_no_room_since", None)
            run.spec.pop("_no_room_noted", None)
        self._ask_nodes(decision)
        if decision.unplaceable > 0 and elastic.is_elastic(run.spec):
            if run.spec.get("_wait_noted") != decision.unplaceable:  # a new count: a new line
                run.spec["_wait_noted"] = decision.unplaceable
                self._emit(run, {"kind": "note", "text": elastic.waiting_note(run, decision)})
        elif decision.unplaceable > 0 and not run.spec.get("_wait_noted"):
            run.spec["_wait_noted"] = True
            busy = sum(1 for w in self._registry.workers.values() if w.busy)
            idle = len(self._registry.workers) - busy
            self._emit(
                run,
                {
                    "kind": "note",
                    "text": (
                        f"waiting: the run needs {run.world_size} workers; {idle} idle, {busy} busy with "
                        f"other runs, and the cluster holds at most {self._registry.capacity()}"
                    ),
                },
            )
        return True

    def _ask_nodes(self, decision: scheduler.Fork) -> None:
        """Retire the idle workers of another kind the decision names (for room), then ask
        each node for its forks of the decision's kind."""
        for wid in decision.retire:
            w = self._registry.remove_worker(wid)
            node = self._registry.nodes.get(w.node_id) if w is not None else None
            if node is not None:
                self._send(node.identity, messages.RETIRE_WORKER, {"worker_id": wid})
        for node_id, count in decision.forks.items():
            node = self._registry.nodes[node_id]
            content = self._registry.asked(node, count, decision.kind)
            self._send(node.identity, messages.SPAWN_WORKERS, content)

    def _group_for(self, chosen: list[WorkerInfo], use_gpu: bool, timeout_s: float | None) -> dict:
        backend = "nccl" if use_gpu else "gloo"
        key = self._registry.group_key(tuple(w.worker_id for w in chosen), backend, timeout_s)
        master = chosen[0]
        # A group kept across re-runs keeps its port (MASTER_PORT stays; no socket bound
        # and closed per run to find a free one).
        port = master.store_port or self._ports.get(key) or _free_port(master.ip)
        if key not in self._ports:
            live = {g[1] for g in self._registry.groups.values()}
            self._ports = {k: p for k, p in self._ports.items() if k in live}
            self._ports[key] = port
        group = {
            "key": key,
            "backend": backend,
            "master_addr": master.ip,
            "master_port": port,
            "store_port": master.store_port,
            "file_store": len({w.node_id for w in chosen}) == 1,
        }
        if timeout_s:
            group["timeout_s"] = timeout_s
        return group

    def _start(self, run: Run, placement: scheduler.Placement, gated: bool = False) -> None:
        if not gated and self.gate is not None and self.gate.hold(run, placement):
            return  # its nodes lack its shared-memory data: started on the client's data_ready
        spec = run.spec
        chosen = [self._registry.workers[wid] for wid in placement.worker_ids]
        group = self._group_for(chosen, bool(spec.get("use_gpu")), spec.get("timeout_s"))
        checkpoint = run.store.latest_path() or spec.get("resume_from_checkpoint")
        nodes = list(dict.fromkeys(w.node_id for w in chosen))
        before = len(run.ranks)  # the last attempt's world size (0: the first)
        self._controller.placed(run, placement.worker_ids)
        cpus = spec.get("cpus_per_worker")
        for rank, w in enumerate(chosen):
            w.run_id, w.rank, w.cpus = run.run_id, rank, cpus
        tasks = self._rank_tasks(run, chosen, placement.gpu_ids, nodes, group, checkpoint)
        self._send_each(messages.RUN_TASK, tasks, run.payload)
        # The restart's note went out when the attempt failed (controller._restart): one
        # note per restart; where the new attempt runs is in the RUNNING event's ranks.
        restart = run.spec.pop("_restart", None)
        self._elastic_notes(run, before, nodes, restart, checkpoint)
        self._emit(
            run,
            {
                "kind": "state",
                "state": "RUNNING",
                "attempt": run.attempt,
                "ranks": [
                    {"rank": r, "worker_id": w.worker_id, "pid": w.pid, "hostname": w.hostname}
                    for r, w in enumerate(chosen)
                ],
            },
        )

    def _rank_tasks(
        self,
        run: Run,
        chosen: list[WorkerInfo],
        gpu_ids: list,
        nodes: list,
        group: dict,
        checkpoint: str | None,
    ) -> list[tuple]:
        """Each placed rank's RUN_TASK, as (worker identity, content); takes the ranks' GPUs."""
        spec = run.spec
        cpus = spec.get("cpus_per_worker")
        local_counts = {nid: sum(1 for w in chosen if w.node_id == nid) for nid in nodes}
        seen: dict[str, int] = {}
        # Each rank's share of its node's cores, counting every rank busy there now (this
        # run's too): four one-rank trials on two cores get a thread each, not two.
        threads = {nid: self._registry.thread_share(nid) for nid in nodes}
        tasks = []
        for rank, (w, gpu_id) in enumerate(zip(chosen, gpu_ids)):
            w.threads, w.attempt = cpus or threads[w.node_id], run.attempt
            local_rank = seen.get(w.node_id, 0)
            seen[w.node_id] = local_rank + 1
            if gpu_id is not None:
                self._registry.take_gpu(w.node_id, gpu_id)
                run.gpu_ids[rank] = (w.node_id, gpu_id)
            tasks.append(
                (
                    w.identity,
                    {
                        "run_id": run.run_id,
                        "name": run.name,
                        "path": str(run.rundir.path),
                        "rank": rank,
                        "world_size": len(chosen),
                        "local_rank": local_rank,
                        "local_world_size": local_counts[w.node_id],
                        "node_rank": nodes.index(w.node_id),
                        "group": group,
                        "use_gpu": bool(spec.get("use_gpu")),
                        "gpu_id": gpu_id,
                        "cwd": spec.get("cwd"),
                        "sys_path": spec.get("sys_path"),
                        **({"env": spec["env"]} if spec.get("env") else {}),
                        "attempt": run.attempt,
                        "checkpoint": checkpoint,
                        "num_threads": w.threads,
                        "node_id": w.node_id,
                        "stream_checkpoints": not self._registry.nodes[w.node_id].shared_storage,
                        **({"elastic": True} if elastic.is_elastic(spec) else {}),
                    },
                )
            )
        return tasks

    def _elastic_notes(
        self, run: Run, before: int, nodes: list, restart: dict | None, checkpoint: str | None
    ) -> None:
        """An elastic run's line per resize, and once that its max is beyond the cluster."""
        if not elastic.is_elastic(run.spec):
            return
        size = len(run.ranks)
        capped = elastic.capped_note(run, size, self._registry.capacity())
        if capped:
            self._emit(run, {"kind": "note", "text": capped})
        grow = run.spec.pop("_grow", None)
        known = run.spec.get("_nodes_known", ())
        run.spec["_nodes_known"] = tuple(self._registry.nodes)  # for the next resize's "joined"
        if before and before != size:
            if restart:
                why = restart["cause"] + (f": {restart['why']}" if restart.get("why") else "")
            else:
                joined = [n for n in nodes if n not in known]
                why = (
                    "node" + "s" * (len(joined) > 1) + f" {', '.join(joined)} joined"
                    if joined
                    else (grow or {}).get("why", "room to grow")
                )
            warning = None if checkpoint else elastic.no_checkpoint_warning(run)
            if warning:
                self._emit(run, warning)
            took = time.monotonic() - run.stopping_since if run.stopping_since is not None else None
            self._emit(
                run,
                elastic.resize_note(
                    run, before, size, why, os.path.basename(checkpoint) if checkpoint else None, took
                ),
            )


def _free_port(host: str) -> int:
    """A TCP port free right now on ``host`` (for torch.distributed's rendezvous store)."""
    s = socket.socket()
    try:
        s.bind((host if host != "0.0.0.0" else "", 0))
        return s.getsockname()[1]
    except OSError:
        return 20000 + int.from_bytes(os.urandom(2), "little") % 20000
    finally:
        s.close()
