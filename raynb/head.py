"""The head: one per cluster. Owns the registry of nodes, workers and runs,
schedules runs onto idle warm workers, relays their events to clients and
writes each run's directory.

Everything happens on one thread around one ROUTER socket; every peer (client,
node agent, worker) is a DEALER that names itself with its routing id.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

import zmq

from . import protocol as P
from .checkpoint_store import CheckpointStore
from .connection import raynb_home, remove_connection_file, write_connection_file
from .procutil import describe_exit, python_env, signal_name
from .rundir import (CorruptRunDirectory, RunDirectory, default_storage_path, make_run_name,
                     read_run_dir, write_json_atomic)

log = logging.getLogger("raynb.head")

# A cancelled or failed run's ranks get this long to return before they are
# killed and replaced (a rank stuck in a collective never returns on its own).
CANCEL_GRACE_S = 1.0
# When a rank died, its peers are most likely blocked inside a collective, where no
# interrupt reaches them: they are replaced from the zygote sooner (a restart waits on them).
DEAD_PEER_GRACE_S = 0.3
TICK_S = 0.1
# A node agent sends stats every second; one silent this long is lost (its machine
# died or the network split), and its ranks fail the runs they were in.
NODE_TIMEOUT_S = 10.0
# The local node agent is restarted when it dies, at most this often per minute.
LOCAL_NODE_RESTARTS_PER_MIN = 3
# Finished runs read back from disk when the head starts (newest first).
ARCHIVE_LIMIT = 1000
TERMINAL = ("FINISHED", "FAILED", "CANCELLED")
# A run's record keeps its first FAILURES_HEAD failures and the latest, FAILURES_KEPT in all.
FAILURES_HEAD, FAILURES_KEPT = 10, 100
# Fields added to every report (not the user's metrics).
_AUTO_FIELDS = ("training_iteration", "timestamp", "time_total_s", "time_this_iter_s")


@dataclass
class WorkerInfo:
    worker_id: str
    identity: bytes
    node_id: str
    pid: int
    hostname: str
    ip: str
    run_id: str | None = None
    rank: int | None = None
    group_key: str | None = None
    stats: dict = field(default_factory=dict)
    store_port: int | None = None  # its always-listening TCPStore server (rendezvous as rank 0)

    @property
    def busy(self) -> bool:
        return self.run_id is not None


@dataclass
class NodeInfo:
    node_id: str
    identity: bytes
    hostname: str
    ip: str
    pid: int
    num_workers: int
    max_workers: int
    spawning: int = 0  # forks asked for, not yet ready
    gpus: list = field(default_factory=list)       # CUDA device indices on this node
    gpus_in_use: set = field(default_factory=set)
    last_seen: float = field(default_factory=time.monotonic)

    @property
    def free_gpus(self) -> list:
        return [g for g in self.gpus if g not in self.gpus_in_use]


@dataclass
class Run:
    run_id: str
    name: str
    client: bytes
    spec: dict
    payload: list
    rundir: RunDirectory
    state: str = "PENDING"
    ranks: list = field(default_factory=list)         # worker_id by rank
    done: dict = field(default_factory=dict)          # rank -> status
    errors: list = field(default_factory=list)
    result: list = field(default_factory=list)        # rank 0's return value frames
    submitted: float = field(default_factory=time.time)
    started: float | None = None
    ended: float | None = None
    deadline: float | None = None                     # when unfinished ranks get killed
    gpu_ids: dict = field(default_factory=dict)       # rank -> (node_id, CUDA device index)
    reports: int = 0
    last_metrics: dict = field(default_factory=dict)
    # fault tolerance and checkpoints
    attempt: int = 0                                  # restarts so far
    failures: list = field(default_factory=list)      # the cause of each failed attempt
    # Failures of earlier fits of a resumed run (and the head's death under it): kept in
    # ``failures``, but not counted against this fit's FailureConfig(max_failures).
    failures_before: int = 0
    failures_dropped: int = 0  # left out of ``failures`` (see add_failure)
    store: CheckpointStore | None = None
    report_counts: dict = field(default_factory=dict)  # rank -> reports this attempt
    staged: dict = field(default_factory=dict)        # report index -> {rank: staged dir}
    rank0_metrics: dict = field(default_factory=dict)  # report index -> rank 0's metrics
    followers: set = field(default_factory=set)       # clients attached besides the submitter
    archived: bool = False                            # read back from disk, not run by this head

    @property
    def world_size(self) -> int:
        return int(self.spec["num_workers"])

    @property
    def num_failures(self) -> int:
        return len(self.failures) + self.failures_dropped

    def add_failure(self, cause: dict) -> None:
        """Record a failed attempt. With unlimited restarts a function that fails at once
        restarts ~100 times a second: keeping every failure (traceback and all) grew the
        head's memory without bound and rewrote them all into run.json at each restart
        (O(n^2) writes, the head stalling). The first FAILURES_HEAD and the latest are kept;
        the rest are counted."""
        self.failures.append(cause)
        if len(self.failures) > FAILURES_KEPT:
            del self.failures[FAILURES_HEAD]
            self.failures_dropped += 1

    @property
    def max_failures(self) -> int:
        return int(self.spec.get("max_failures") or 0)

    def summary(self) -> dict:
        """What ``raynb.runs()`` lists and ``run.json`` holds."""
        return {
            "run_id": self.run_id, "name": self.name, "state": self.state,
            "path": str(self.rundir.path), "world_size": self.world_size,
            "use_gpu": bool(self.spec.get("use_gpu")), "submitted": self.submitted,
            "started": self.started, "ended": self.ended, "attempt": self.attempt,
            "max_failures": self.max_failures, "failures": self.failures,
            "num_failures": self.num_failures,
            "errors": self.errors if self.state == "FAILED" else [],
            "metrics": self.last_metrics, "num_reports": self.reports,
            "checkpoints": [{k: c[k] for k in ("index", "name", "metrics")}
                            for c in (self.store.records() if self.store else [])],
            "checkpoint_config": self.spec.get("checkpoint_config"),
            "timeout_s": self.spec.get("timeout_s"), "kind": self.spec.get("name_prefix"),
        }

    @property
    def finishing(self) -> bool:
        return self.state in ("CANCELLING", "FAILING")


class Head:
    """Args:
        bind_host: interface to listen on (127.0.0.1 unless nodes join from other hosts).
        port: TCP port, 0 for a free one.
        key: the cluster's HMAC key.
        num_workers: workers the local node keeps warm (0 = no local node).
    """

    def __init__(self, key: bytes, bind_host: str = "127.0.0.1", port: int = 0,
                 num_workers: int = 4, max_workers: int | None = None):
        self.key = key
        self.session = P.Session(key)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        P.configure_socket(self.sock)
        # No ROUTER_HANDOVER: routing ids are guessable (worker:local-w1), and with
        # handover anyone who can connect, key or not, would take over a worker's or
        # node's route and receive its tasks. A peer with an id already in use is
        # ignored until the first one disconnects.
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        # A ROUTER silently drops what it sends to a peer whose queue is at the high-water
        # mark: a client slower than its run's output (a notebook's stdout is slow) would
        # lose events and, worse, the run_done it waits for. Never drop; a gone peer's
        # queue is freed when it disconnects.
        self.sock.setsockopt(zmq.SNDHWM, 0)
        if port:
            self.sock.bind(f"tcp://{bind_host}:{port}")
        else:
            port = self.sock.bind_to_random_port(f"tcp://{bind_host}")
        self.address = f"tcp://{bind_host}:{port}"
        self.num_workers = num_workers
        self.max_workers = max_workers
        self.nodes: dict[str, NodeInfo] = {}
        self.workers: dict[str, WorkerInfo] = {}
        self.runs: dict[str, Run] = {}
        self.queue: list[str] = []  # pending run ids, FIFO
        # worker ids in rank order -> (backend, key) of the process group they form
        self.groups: dict[tuple, tuple] = {}
        self.local_node: subprocess.Popen | None = None
        self._local_node_starts: list[float] = []
        self.connection_info: dict | None = None  # written to the connection file by main()
        self.started = time.time()
        self._stop = False
        self._storage_paths: set[str] = set()
        self._load_archive()

    # -- plumbing ---------------------------------------------------------------
    def send(self, identity: bytes, msg_type: str, content: dict | None = None, buffers=()):
        try:
            self.session.send(self.sock, msg_type, content, buffers, identity=identity)
        except zmq.ZMQError as e:
            log.warning("could not send %s to %r: %s", msg_type, identity, e)

    def start_local_node(self) -> None:
        cmd = [sys.executable, "-m", "raynb.node", "--address", self.address,
               "--workers", str(self.num_workers), "--node-id", "local", "--die-with-parent"]
        if self.max_workers:
            cmd += ["--max-workers", str(self.max_workers)]
        log_path = raynb_home() / "logs" / "node-local.log"
        log_path.parent.mkdir(exist_ok=True)
        with open(log_path, "ab") as log_file:
            self.local_node = subprocess.Popen(
                cmd, env=python_env({"RAYNB_KEY": self.key.decode()}),
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT)
        self._local_node_starts.append(time.monotonic())
        if self.connection_info is not None:
            self.connection_info["pids"]["node"] = self.local_node.pid
            write_connection_file(self.connection_info)

    # -- main loop --------------------------------------------------------------
    def serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while not self._stop:
            if poller.poll(TICK_S * 1000):
                for _ in range(1000):  # drain what is there, then tick
                    try:
                        frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    self._receive(frames)
            self.tick()
        self._fail_active_runs("the raynb cluster was stopped (`raynb stop`, or the head got "
                               "SIGTERM) while this run was active")
        self.shutdown_nodes()

    def _receive(self, frames) -> None:
        identity = frames[0].bytes
        try:
            msg = self.session.deserialize(frames[1:], identity)
        except Exception as e:  # noqa: BLE001 - a hostile peer must never crash the head
            self.session.rejected += 1
            log.warning("rejected message from %r: %s", identity[:64], e)
            return
        if identity.startswith(b"node:"):
            for node in self.nodes.values():
                if node.identity == identity:
                    node.last_seen = time.monotonic()
        handler = getattr(self, "on_" + msg.msg_type, None)
        if handler is None:
            log.warning("unexpected %s from %r", msg.msg_type, identity)
            return
        try:
            handler(msg)
        except Exception:  # noqa: BLE001 - one bad request must not take the cluster down
            log.exception("error handling %s from %r", msg.msg_type, identity)
            if identity.startswith(b"client:"):
                self.send(identity, P.ERROR, {"message": f"the head failed to handle {msg.msg_type}; "
                                                         "see head.log in RAYNB_HOME"})

    def tick(self) -> None:
        now = time.monotonic()
        for run in list(self.runs.values()):
            if run.finishing and run.deadline is not None and now >= run.deadline:
                self._kill_unfinished(run)
            if run.state == "RUNNING":
                run.rundir.flush()
        # Without these checks a dead node agent's ranks (its zygote kills them) would
        # never be reported, and their runs and clients would wait forever.
        if self.local_node is not None and self.local_node.poll() is not None:
            code = self.local_node.returncode
            how = describe_exit(code, None) if code >= 0 else describe_exit(None, -code)
            self.local_node = None
            if "local" in self.nodes:
                self._lose_node(self.nodes["local"], how)
            restarts = [t for t in self._local_node_starts[1:] if now - t < 60]
            if not self._stop and len(restarts) < LOCAL_NODE_RESTARTS_PER_MIN:
                log.warning("the local node agent %s; restarting it", how)
                self.start_local_node()
            elif not self._stop:
                log.error("the local node agent %s again; not restarting it (see node-local.log)", how)
        for node in list(self.nodes.values()):
            if now - node.last_seen > NODE_TIMEOUT_S:
                if node.node_id == "local" and self.local_node is not None:
                    self.local_node.kill()  # hung: the check above restarts it next tick
                    node.last_seen = now
                else:
                    self._lose_node(node, f"stopped answering ({NODE_TIMEOUT_S:.0f}s without a message)")

    def _lose_node(self, node: NodeInfo, why: str) -> None:
        """Forget a dead or silent node and its workers; their runs fail naming the rank."""
        log.warning("node %s (%s, pid %s) %s", node.node_id, node.hostname, node.pid, why)
        self.nodes.pop(node.node_id, None)
        for w in [w for w in self.workers.values() if w.node_id == node.node_id]:
            del self.workers[w.worker_id]
            self._forget_groups_with(w.worker_id)
            self._rank_lost(w, f"was lost with its node (node agent {node.node_id} on "
                               f"{node.hostname}: {why})")
        self.schedule()

    def _fail_active_runs(self, why: str) -> None:
        for run in list(self.runs.values()):
            if run.state not in TERMINAL:
                run.errors.append({"message": why})
                self._finish(run, "FAILED")

    # -- clients ----------------------------------------------------------------
    def on_hello(self, msg: P.Message) -> None:
        self.send(msg.identity, P.HELLO_REPLY, {"address": self.address, "pid": os.getpid(),
                                                "version": P.PROTOCOL_VERSION})

    def on_ping(self, msg: P.Message) -> None:
        self.send(msg.identity, P.PONG, {"time": time.time()})

    # -- run records ------------------------------------------------------------
    def _load_archive(self) -> None:
        """Read back the runs in known storage paths, so a restarted head lists them."""
        paths = {default_storage_path()}
        try:
            import json

            paths |= set(json.loads((raynb_home() / "storage_paths.json").read_text()))
        except (OSError, ValueError, TypeError):
            pass
        self._storage_paths = set(paths)
        found = []
        for storage in paths:
            try:
                entries = list(os.scandir(os.path.expanduser(storage)))
            except OSError:
                continue
            for e in entries:
                if e.is_dir() and os.path.exists(os.path.join(e.path, "run.json")):
                    found.append((e.stat().st_mtime, e.path))
        for _, path in sorted(found, reverse=True)[:ARCHIVE_LIMIT]:
            try:
                rec = read_run_dir(path, with_reports=False)
            except (OSError, CorruptRunDirectory, ValueError) as e:
                log.warning("skipping run directory %s: %s", path, e)
                continue
            self._archive_run(rec)

    def _archive_run(self, rec: dict) -> Run:
        spec = {"num_workers": rec.get("world_size") or 1, "use_gpu": rec.get("use_gpu"),
                "max_failures": rec.get("max_failures"), "name_prefix": rec.get("kind"),
                "checkpoint_config": rec.get("checkpoint_config")}
        path = rec["path"]
        run = Run(rec.get("run_id") or uuid.uuid4().hex, rec["name"], b"", spec, [],
                  RunDirectory(os.path.dirname(path), os.path.basename(path)),
                  state=rec.get("state", "FAILED"), submitted=rec.get("submitted") or 0.0,
                  started=rec.get("started"), ended=rec.get("ended"),
                  errors=list(rec.get("errors") or []), attempt=rec.get("attempt") or 0,
                  failures=list(rec.get("failures") or []),
                  failures_dropped=max(0, (rec.get("num_failures") or 0) - len(rec.get("failures") or [])),
                  last_metrics=rec.get("metrics") or {}, archived=True,
                  reports=rec.get("num_reports") or 0)
        run.store = CheckpointStore(path, spec["checkpoint_config"], rec.get("checkpoints"))
        if run.state not in TERMINAL:
            # The head that ran it died mid-run: the run is over, and says how to continue.
            run.state = "FAILED"
            run.add_failure({"message": "the raynb head stopped while this run was active"})
            run.errors.append({"message": "the raynb head stopped while this run was active; continue "
                                          "it with TorchTrainer.restore(path) or %%ray_train --resume"})
            # What its ranks staged and nobody committed is not a checkpoint (as when a run
            # ends); left here it stayed for good unless the run was resumed.
            run.store.discard_staging()
            self._write_state(run)  # Result.from_path tells the same, with no head running
        self.runs.setdefault(run.run_id, run)
        return run

    def _remember_storage(self, storage: str) -> None:
        if storage in self._storage_paths:
            return
        self._storage_paths.add(storage)
        try:
            write_json_atomic(raynb_home() / "storage_paths.json", sorted(self._storage_paths))
        except OSError as e:
            log.warning("could not record storage path %s: %s", storage, e)

    def _find_run(self, name: str | None, run_id: str | None = None) -> Run | None:
        if run_id and run_id in self.runs:
            return self.runs[run_id]
        matches = [r for r in self.runs.values() if r.name == name]
        # A name reused (a resumed run): the live or newest one.
        return max(matches, key=lambda r: (r.state not in TERMINAL, r.submitted), default=None)

    def _record(self, run: Run) -> dict:
        run.rundir.flush()
        try:
            rec = read_run_dir(run.rundir.path)
        except (OSError, CorruptRunDirectory) as e:
            rec = {"reports": [], "output": [], "read_error": str(e)}
        rec.update(run.summary())
        for c in rec.get("checkpoints", []):
            c["path"] = str(run.rundir.path / c["name"])
        return rec

    def _write_state(self, run: Run) -> None:
        try:
            run.rundir.write_state(run.summary())
        except OSError as e:
            log.warning("could not write %s/run.json: %s", run.rundir.path, e)

    def on_list_runs(self, msg: P.Message) -> None:
        self.send(msg.identity, P.RUNS_REPLY, {
            "runs": [r.summary() for r in sorted(self.runs.values(), key=lambda r: r.submitted)]})

    def on_get_run(self, msg: P.Message) -> None:
        run = self._find_run(msg.content.get("name"), msg.content.get("run_id"))
        if run is None:
            return self.send(msg.identity, P.ERROR, {"message": self._no_such_run(msg.content.get("name"))})
        self.send(msg.identity, P.RUN_RECORD, {"record": self._record(run)})

    def on_attach_run(self, msg: P.Message) -> None:
        run = self._find_run(msg.content.get("name"), msg.content.get("run_id"))
        if run is None:
            return self.send(msg.identity, P.ERROR, {"message": self._no_such_run(msg.content.get("name"))})
        if run.state not in TERMINAL:
            run.followers.add(msg.identity)
        rec = self._record(run)
        rec["ranks"] = [{"rank": r, "worker_id": wid, "pid": self.workers[wid].pid,
                         "hostname": self.workers[wid].hostname}
                        for r, wid in enumerate(run.ranks) if wid in self.workers]
        self.send(msg.identity, P.RUN_RECORD, {"record": rec})

    def _no_such_run(self, name) -> str:
        names = [r.name for r in sorted(self.runs.values(), key=lambda r: r.submitted)][-5:]
        return (f"no run named {name!r} on this cluster; raynb.runs() lists them"
                + (f" (latest: {', '.join(names)})" if names else ""))

    def on_status_request(self, msg: P.Message) -> None:
        self.send(msg.identity, P.STATUS_REPLY, self.status())

    def status(self) -> dict:
        return {
            "address": self.address,
            "pid": os.getpid(),
            "uptime_s": time.time() - self.started,
            "rejected_messages": self.session.rejected,
            "nodes": [{"node_id": n.node_id, "hostname": n.hostname, "ip": n.ip, "pid": n.pid,
                       "num_workers": n.num_workers, "max_workers": n.max_workers,
                       "spawning": n.spawning, "gpus": n.gpus,
                       "gpus_in_use": sorted(n.gpus_in_use)} for n in self.nodes.values()],
            "workers": [{"worker_id": w.worker_id, "node_id": w.node_id, "pid": w.pid,
                         "state": "busy" if w.busy else "idle", "run_id": w.run_id,
                         "run": self.runs[w.run_id].name if w.run_id in self.runs else None,
                         "rank": w.rank, **w.stats} for w in self.workers.values()],
            "runs": [{"run_id": r.run_id, "name": r.name, "state": r.state,
                      "world_size": r.world_size, "path": str(r.rundir.path)}
                     for r in self.runs.values()],
        }

    def on_shutdown(self, msg: P.Message) -> None:
        log.info("shutdown requested")
        self.send(msg.identity, P.STATUS_REPLY, {"stopping": True})
        self._stop = True

    def on_submit_run(self, msg: P.Message) -> None:
        spec = dict(msg.content)
        n = spec.get("num_workers")
        limit = self.capacity()
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            return self.send(msg.identity, P.ERROR, {
                "run_id": spec.get("run_id"),
                "message": f"num_workers must be a positive integer, got {n!r}"})
        if n > limit:
            return self.send(msg.identity, P.ERROR, {
                "run_id": spec.get("run_id"),
                "message": f"num_workers={n} is more than this cluster can hold ({limit} workers "
                           f"over {len(self.nodes)} node(s)); ask for at most {limit}, or add a node "
                           "with `raynb node --address ...`, or restart with `raynb start "
                           "--max-workers N`"})
        total_gpus = sum(len(node.gpus) for node in self.nodes.values())
        if spec.get("use_gpu") and n > total_gpus:
            return self.send(msg.identity, P.ERROR, {
                "run_id": spec.get("run_id"),
                "message": f"use_gpu=True with num_workers={n} needs {n} GPUs (one per rank); this "
                           f"cluster has {total_gpus}. Ask for at most {total_gpus} workers, run on "
                           "CPU (use_gpu=False), or add a GPU node with `raynb node`"})
        if not msg.buffers:
            return self.send(msg.identity, P.ERROR, {"run_id": spec.get("run_id"),
                                                     "message": "submit_run carries no function"})
        run_id = spec.get("run_id") or uuid.uuid4().hex
        name = spec.get("name") or make_run_name(spec.get("name_prefix", "TorchTrainer"))
        storage = os.path.expanduser(spec.get("storage_path") or default_storage_path())
        path = os.path.join(storage, name)
        live = [r for r in self.runs.values() if r.name == name and r.state not in TERMINAL
                and str(r.rundir.path) == path]
        if live:
            return self.send(msg.identity, P.ERROR, {"run_id": run_id, "message": (
                f"run {name!r} is still {live[0].state.lower()}; attach to it with "
                f"raynb.attach({name!r}), or cancel it first")})
        previous = None
        if spec.get("resume"):
            try:
                previous = read_run_dir(path, with_reports=False)
            except (OSError, CorruptRunDirectory) as e:
                return self.send(msg.identity, P.ERROR, {"run_id": run_id, "message": (
                    f"cannot resume run {name!r}: {e}. Nothing was changed in {path}")})
        elif os.path.exists(os.path.join(path, "run.json")):
            return self.send(msg.identity, P.ERROR, {"run_id": run_id, "message": (
                f"a run named {name!r} already exists in {storage}; continue it with "
                f"TorchTrainer.restore({path!r}) or %%ray_train --name {name} --resume, or "
                "choose another name")})
        rundir = RunDirectory(storage, name)
        self._remember_storage(storage)
        run = Run(run_id, name, msg.identity, spec, list(msg.buffers), rundir)
        run.store = CheckpointStore(path, spec.get("checkpoint_config"),
                                    previous.get("checkpoints") if previous else None)
        if previous is not None:
            rundir.load_existing()
            run.reports = len(rundir.rows)
            run.last_metrics = rundir.rows[-1] if rundir.rows else {}
            run.store.discard_staging()
            run.failures = list(previous.get("failures") or [])
            run.failures_dropped = max(0, (previous.get("num_failures") or 0) - len(run.failures))
            if previous.get("state") not in TERMINAL:
                # Its run.json still says it was active: the head that ran it died mid-run
                # (a live run of this head was refused above). That attempt failed too, and
                # the resumed run's Result.failures must not lose it.
                run.add_failure({"message": "the raynb head stopped while this run was active"})
            run.failures_before = run.num_failures
        else:
            rundir.write_params(spec.get("params", {}))
        rundir.write_function(P.buffer_bytes(msg.buffers[0]))
        self.runs[run_id] = run
        self.queue.append(run_id)
        self._write_state(run)
        self.send(msg.identity, P.RUN_ACCEPTED, {"run_id": run_id, "name": name,
                                                 "path": str(rundir.path)})
        self._event(run, {"kind": "state", "state": "PENDING"})
        self.schedule()

    def on_cancel_run(self, msg: P.Message) -> None:
        run = self.runs.get(msg.content.get("run_id"))
        if run is None:
            return
        if run.state == "PENDING":
            if run.run_id in self.queue:
                self.queue.remove(run.run_id)
            run.errors.append({"message": "cancelled before it started"})
            self._finish(run, "CANCELLED")
        elif run.state == "RUNNING":
            self._begin_finishing(run, "CANCELLING")
        elif run.state == "FAILING":
            # A cancel (an interrupt, a Tune STOP or exploit) that lands between a rank's
            # failure and the restart: the ranks are already being stopped, and when they
            # are, the run ends CANCELLED instead of restarting (it used to be dropped, and
            # the run restarted and ran on with nobody waiting for it).
            run.state = "CANCELLING"
            self._maybe_finish(run)

    # -- nodes and workers ------------------------------------------------------
    def on_node_register(self, msg: P.Message) -> None:
        c = msg.content
        self.nodes[c["node_id"]] = NodeInfo(
            c["node_id"], msg.identity, c["hostname"], c["ip"], c["pid"],
            c["num_workers"], c["max_workers"], spawning=c["num_workers"], gpus=list(c.get("gpus", [])))
        log.info("node %s joined (%s, %d workers)", c["node_id"], c["hostname"], c["num_workers"])

    def on_worker_ready(self, msg: P.Message) -> None:
        c = msg.content
        w = WorkerInfo(c["worker_id"], msg.identity, c["node_id"], c["pid"], c["hostname"], c["ip"],
                       store_port=c.get("store_port"))
        self.workers[w.worker_id] = w
        node = self.nodes.get(w.node_id)
        if node is not None and node.spawning > 0:
            node.spawning -= 1
        self.schedule()

    def on_node_stats(self, msg: P.Message) -> None:
        by_run: dict[str, dict] = {}
        for wid, st in msg.content.get("workers", {}).items():
            w = self.workers.get(wid)
            if w is None:
                continue
            w.stats = {"cpu_percent": st.get("cpu_percent"), "rss": st.get("rss")}
            if w.run_id is not None:
                by_run.setdefault(w.run_id, {})[w.rank] = {"pid": w.pid, **w.stats}
        self.send(msg.identity, P.PONG, {"time": time.time()})  # the node's sign of our life
        for run_id, workers in by_run.items():
            run = self.runs.get(run_id)
            if run is not None and run.state == "RUNNING":
                self._event(run, {"kind": "stats", "workers": workers})

    def on_worker_exited(self, msg: P.Message) -> None:
        c = msg.content
        w = self.workers.pop(c["worker_id"], None)
        how = describe_exit(c.get("exitcode"), c.get("signal"))
        log.info("worker %s (pid %s) %s", c["worker_id"], c["pid"], how)
        if w is not None:
            self._rank_lost(w, how, signal=signal_name(c.get("signal")), exitcode=c.get("exitcode"))
        self._forget_groups_with(c["worker_id"])
        self._refill(c.get("node_id"))
        self.schedule()

    def _rank_lost(self, w: WorkerInfo, how: str, **fields) -> None:
        """A worker died or vanished: the rank it held fails its run."""
        run = self.runs.get(w.run_id) if w.run_id is not None else None
        if run is None or w.rank in run.done:
            return
        run.done[w.rank] = "died"
        if run.state != "CANCELLING":
            # Recorded even when a peer's error came first: the death is the cause that a
            # restart note and the final error must name.
            run.errors.append({"rank": w.rank, "pid": w.pid, "hostname": w.hostname, **fields,
                               "message": f"rank {w.rank} (pid {w.pid} on {w.hostname}) {how}"})
        if not run.finishing:
            self._begin_finishing(run, "FAILING", DEAD_PEER_GRACE_S)
        elif run.state == "FAILING" and run.deadline is not None:
            # A peer's gloo error ("connection closed by peer") often arrives before the
            # death and started the longer grace of an exception; the ranks still running
            # wait on the dead one in a collective, so the dead-peer grace applies from now
            # (else a DDP run's restart waited a full CANCEL_GRACE_S for them).
            run.deadline = min(run.deadline, time.monotonic() + DEAD_PEER_GRACE_S)
        self._maybe_finish(run)

    def _refill(self, node_id: str | None) -> None:
        """Keep each node at its warm worker count: replace the dead from the zygote."""
        node = self.nodes.get(node_id) if node_id else None
        if node is None:
            return
        have = sum(1 for w in self.workers.values() if w.node_id == node.node_id) + node.spawning
        if have < node.num_workers:
            node.spawning += node.num_workers - have
            self.send(node.identity, P.SPAWN_WORKERS, {"count": node.num_workers - have})

    def capacity(self) -> int:
        return sum(n.max_workers for n in self.nodes.values()) or (self.max_workers or 0) or 1

    # -- scheduling -------------------------------------------------------------
    def schedule(self) -> None:
        while self.queue:
            run = self.runs[self.queue[0]]
            n = run.world_size
            idle = [w for w in self.workers.values() if not w.busy]
            if len(idle) < n:
                if self._grow(n - len(idle)) > 0 and not run.spec.get("_wait_noted"):
                    run.spec["_wait_noted"] = True
                    busy = sum(1 for w in self.workers.values() if w.busy)
                    self._event(run, {"kind": "note", "text": (
                        f"waiting: the run needs {n} workers; {len(idle)} idle, {busy} busy with "
                        f"other runs, and the cluster holds at most {self.capacity()}")})
                return
            if run.spec.get("use_gpu"):
                idle = self._gpu_eligible(idle, n)
                if idle is None:
                    return  # GPUs busy with another run: wait for it
            self.queue.pop(0)
            self._start(run, self._pick(idle, n))

    def _gpu_eligible(self, idle: list[WorkerInfo], n: int) -> list[WorkerInfo] | None:
        """Idle workers, at most one per free GPU of their node; None if fewer than ``n``."""
        out = []
        for node in self.nodes.values():
            on_node = [w for w in idle if w.node_id == node.node_id]
            out += on_node[:len(node.free_gpus)]
        return out if len(out) >= n else None

    def _grow(self, missing: int) -> int:
        """Fork more workers when a run needs more than are idle (never a silent wait).

        Returns how many of the missing workers no node has room for."""
        missing -= sum(n.spawning for n in self.nodes.values())
        for node in sorted(self.nodes.values(), key=lambda n: n.node_id != "local"):
            if missing <= 0:
                return 0
            have = sum(1 for w in self.workers.values() if w.node_id == node.node_id)
            room = node.max_workers - have - node.spawning
            k = min(room, missing)
            if k > 0:
                node.spawning += k
                missing -= k
                self.send(node.identity, P.SPAWN_WORKERS, {"count": k})
        return max(0, missing)

    def _pick(self, idle: list[WorkerInfo], n: int) -> list[WorkerInfo]:
        idle_ids = {w.worker_id for w in idle}
        # Reuse a process group whose members are all idle: no rendezvous needed.
        for members in self.groups:
            if len(members) == n and idle_ids.issuperset(members):
                return [self.workers[m] for m in members]
        # Otherwise pack onto as few nodes as possible, local node first.
        idle.sort(key=lambda w: (w.node_id != "local", w.node_id, w.worker_id))
        return idle[:n]

    def _forget_groups_with(self, worker_id: str) -> None:
        for members in [m for m in self.groups if worker_id in m]:
            del self.groups[members]

    def _group_for(self, chosen: list[WorkerInfo], use_gpu: bool, timeout_s: float | None) -> dict:
        members = tuple(w.worker_id for w in chosen)
        backend = "nccl" if use_gpu else "gloo"
        for other in [m for m in self.groups if m != members and set(m) & set(members)]:
            del self.groups[other]  # these workers now leave that group
        known = self.groups.get(members)
        # The collective timeout is fixed when a group forms: another one needs a new group.
        if known is None or known[0] != backend or known[2] != timeout_s:
            known = self.groups[members] = (backend, uuid.uuid4().hex, timeout_s)
        master = chosen[0]
        group = {"key": known[1], "backend": backend, "master_addr": master.ip,
                 "master_port": master.store_port or _free_port(master.ip),
                 "store_port": master.store_port,
                 "file_store": len({w.node_id for w in chosen}) == 1}
        if timeout_s:
            group["timeout_s"] = timeout_s
        return group

    def _start(self, run: Run, chosen: list[WorkerInfo]) -> None:
        spec = run.spec
        group = self._group_for(chosen, bool(spec.get("use_gpu")), spec.get("timeout_s"))
        checkpoint = run.store.latest_path() or spec.get("resume_from_checkpoint")
        nodes = []
        for w in chosen:
            if w.node_id not in nodes:
                nodes.append(w.node_id)
        local_counts = {nid: sum(1 for w in chosen if w.node_id == nid) for nid in nodes}
        seen: dict[str, int] = {}
        run.ranks = [w.worker_id for w in chosen]
        run.state = "RUNNING"
        run.started = run.started or time.time()  # a restart continues the run's clock
        for rank, w in enumerate(chosen):
            w.run_id, w.rank = run.run_id, rank
            local_rank = seen.get(w.node_id, 0)
            seen[w.node_id] = local_rank + 1
            gpu_id = None
            if spec.get("use_gpu"):
                node = self.nodes[w.node_id]
                gpu_id = node.free_gpus[0]
                node.gpus_in_use.add(gpu_id)
                run.gpu_ids[rank] = (w.node_id, gpu_id)
            self.send(w.identity, P.RUN_TASK, {
                "run_id": run.run_id, "name": run.name, "path": str(run.rundir.path),
                "rank": rank, "world_size": len(chosen), "local_rank": local_rank,
                "local_world_size": local_counts[w.node_id], "node_rank": nodes.index(w.node_id),
                "group": group, "use_gpu": bool(spec.get("use_gpu")), "gpu_id": gpu_id,
                "cwd": spec.get("cwd"), "sys_path": spec.get("sys_path"),
                "attempt": run.attempt, "checkpoint": checkpoint,
            }, run.payload)
        self._event(run, {"kind": "state", "state": "RUNNING", "attempt": run.attempt,
                          "ranks": [{"rank": r, "worker_id": w.worker_id, "pid": w.pid,
                                     "hostname": w.hostname} for r, w in enumerate(chosen)]})

    # -- run events -------------------------------------------------------------
    def _event(self, run: Run, event: dict) -> None:
        event.setdefault("time", time.time())
        self._to_clients(run, P.RUN_EVENT, {"run_id": run.run_id, "event": event})

    def _to_clients(self, run: Run, msg_type: str, content: dict, buffers=()) -> None:
        for identity in (run.client, *run.followers):
            if identity:
                self.send(identity, msg_type, content, buffers)

    def on_task_event(self, msg: P.Message) -> None:
        c = msg.content
        run = self.runs.get(c["run_id"])
        if run is None or run.state not in ("RUNNING", "CANCELLING", "FAILING"):
            return
        if not (0 <= c["rank"] < len(run.ranks)) or run.ranks[c["rank"]] != P.routing_name(msg.identity):
            return  # not a rank of this attempt
        event = c["event"]
        rank = event["rank"] = c["rank"]
        kind = event.get("kind")
        if kind == "output" and isinstance(event.get("text"), str):
            run.rundir.append_output(rank, event["text"])
        elif kind == "report" and isinstance(event.get("metrics"), dict):
            index = event.pop("index", None) or run.report_counts.get(rank, 0) + 1
            run.report_counts[rank] = index
            staged = event.pop("checkpoint", None)
            if staged:
                run.staged.setdefault(index, {})[rank] = staged
            if rank == 0:
                run.reports += 1
                metrics = run.rundir.append_result(event["metrics"], run.started, event.get("time"))
                event["metrics"] = metrics
                run.last_metrics = metrics
                run.rank0_metrics[index] = metrics
                if len(run.rank0_metrics) > 64 and not run.staged:
                    run.rank0_metrics = {index: metrics}
            self._event(run, event)
            if run.staged:
                self._commit_checkpoints(run)
            return
        self._event(run, event)

    def _commit_checkpoints(self, run: Run, run_ended: bool = False) -> None:
        """Commit, in order, each staged checkpoint that every rank has reported past.

        ``run_ended``: every rank returned normally, so all its reports are in."""
        for index in sorted(run.staged):
            behind = [r for r in range(run.world_size) if run.report_counts.get(r, 0) < index]
            if behind and not run_ended:
                return
            try:
                c = run.store.commit(list(run.staged.pop(index).values()),
                                     run.rank0_metrics.pop(index, {}))
            except OSError as e:
                log.error("run %s: could not commit a checkpoint: %s", run.name, e)
                self._event(run, {"kind": "note", "text": f"checkpoint not saved: {e}"})
                continue
            for old in [i for i in run.rank0_metrics if i < index]:
                del run.rank0_metrics[old]
            attr = run.store.score_attr
            if attr and attr not in c["metrics"] and not run.spec.get("_score_noted"):
                # A typo'd or never-reported score attribute ranked every checkpoint last, and
                # pruning silently kept the newest instead of the best.
                run.spec["_score_noted"] = True
                keys = sorted(k for k in c["metrics"] if k not in _AUTO_FIELDS)
                self._event(run, {"kind": "note", "text": (
                    f"{c['name']}: its report has no {attr!r} (it has {', '.join(keys) or 'no metrics'}); "
                    f"CheckpointConfig(checkpoint_score_attribute={attr!r}) ranks such checkpoints "
                    "last: pruning keeps the newest of them, not the best")})
            self._event(run, {"kind": "checkpoint", "index": c["index"], "name": c["name"],
                              "path": c["path"], "metrics": c["metrics"]})
            self._write_state(run)

    def on_task_done(self, msg: P.Message) -> None:
        c = msg.content
        run = self.runs.get(c["run_id"])
        worker = self.workers.get(P.routing_name(msg.identity))
        if worker is not None and worker.run_id == c["run_id"]:
            worker.run_id = worker.rank = None
        if run is None:
            self.schedule()
            return
        rank = c["rank"]
        sender = P.routing_name(msg.identity)
        if not (0 <= rank < len(run.ranks)) or run.ranks[rank] != sender:
            # A late task_done from a rank of an earlier attempt (killed or cancelled, then
            # the run restarted): it must not finish or fail the new attempt's rank.
            self.schedule()
            return
        if rank not in run.done:
            run.done[rank] = c["status"]
            if c["status"] == "ok" and rank == 0:
                run.result = list(msg.buffers)
            elif c["status"] == "error":
                run.errors.append(c["error"])
                if not run.finishing:
                    self._begin_finishing(run, "FAILING")
            elif c["status"] == "cancelled" and not run.finishing:
                # Nobody asked: the rank cannot go on alone (its peers would wait forever).
                run.errors.append({"rank": rank, "message": f"rank {rank} stopped before the run was "
                                                            "cancelled (an interrupt on the worker?)"})
                self._begin_finishing(run, "FAILING")
            if c["status"] != "ok" and worker is not None and run.world_size > 1:
                self._forget_groups_with(worker.worker_id)  # see Worker.execute
        self._maybe_finish(run)
        self.schedule()

    def _begin_finishing(self, run: Run, state: str, grace_s: float = CANCEL_GRACE_S) -> None:
        run.state = state
        run.deadline = time.monotonic() + grace_s
        for rank, wid in enumerate(run.ranks):
            if rank not in run.done and wid in self.workers:
                self.send(self.workers[wid].identity, P.CANCEL_TASK,
                          {"run_id": run.run_id, "attempt": run.attempt})
        self._maybe_finish(run)

    def _kill_unfinished(self, run: Run) -> None:
        """Ranks that did not return within the grace period (stuck in a collective,
        or ignoring interrupts) are killed; their node replaces them."""
        run.deadline = None
        for rank, wid in enumerate(run.ranks):
            w = self.workers.get(wid)
            if rank in run.done or w is None:
                continue
            log.info("run %s: rank %d (pid %d) did not stop in time; killing it", run.name, rank, w.pid)
            node = self.nodes.get(w.node_id)
            run.done[rank] = "killed"
            w.run_id = w.rank = None
            self.workers.pop(wid, None)  # gone for scheduling; its exit is reported later
            self._forget_groups_with(wid)
            if node is not None:
                self.send(node.identity, P.KILL_WORKER, {"worker_id": wid, "signal": signal.SIGKILL})
        self._maybe_finish(run)

    def _maybe_finish(self, run: Run) -> None:
        if run.state in TERMINAL or run.state == "PENDING" or len(run.done) < run.world_size:
            return
        if run.state == "CANCELLING":
            self._finish(run, "CANCELLED")
        elif run.errors or run.state == "FAILING":
            cause = _primary_error(run.errors)
            run.add_failure(cause)
            this_fit = run.num_failures - run.failures_before
            if run.max_failures < 0 or this_fit <= run.max_failures:
                self._restart(run, cause)
            else:
                # Name every failure (of this fit), the cause first: also with a single failure,
                # where a peer's gloo error ("connection closed by peer") often arrives before
                # the dead rank's exit and would otherwise be RunError.rank and lead the message.
                run.errors = (run.failures[-this_fit:-1] + [cause]
                              + [e for e in run.errors if e is not cause])
                self._finish(run, "FAILED")
        else:
            self._commit_checkpoints(run, run_ended=True)
            self._finish(run, "FINISHED")

    def _release(self, run: Run) -> None:
        """Give back the run's GPUs and workers (each still alive goes back to idle)."""
        for node_id, gpu_id in run.gpu_ids.values():
            if node_id in self.nodes:
                self.nodes[node_id].gpus_in_use.discard(gpu_id)
        run.gpu_ids = {}
        for wid in run.ranks:
            w = self.workers.get(wid)
            if w is not None and w.run_id == run.run_id:
                w.run_id = w.rank = None

    def _restart(self, run: Run, cause: dict) -> None:
        """Start the run again on warm workers, from its latest checkpoint.

        Every rank has stopped (returned, or was killed after the grace period); a
        dead worker's replacement is already being forked by its node."""
        self._release(run)
        unsaved = _unsaved_checkpoints(run)
        run.store.discard_staging()
        run.staged, run.rank0_metrics, run.report_counts = {}, {}, {}
        run.attempt += 1
        run.done, run.errors, run.deadline = {}, [], None
        run.state = "PENDING"
        latest = run.store.latest
        limit = "unlimited" if run.max_failures < 0 else run.max_failures
        text = (f"restart {run.num_failures - run.failures_before}/{limit}: {_describe_cause(cause)}; "
                + (f"resuming from {latest['name']}" if latest else
                   f"no checkpoint {'saved ' if unsaved else ''}yet, starting over"
                   if not run.spec.get("resume_from_checkpoint")
                   else "resuming from the checkpoint it started with") + unsaved)
        log.info("run %s: %s", run.name, text)
        self._event(run, {"kind": "note", "text": text, "restart": run.attempt, "cause": cause})
        self._event(run, {"kind": "state", "state": "PENDING", "attempt": run.attempt})
        self._write_state(run)
        self.queue.insert(0, run.run_id)
        self.schedule()

    def _finish(self, run: Run, state: str) -> None:
        run.state = state
        run.ended = time.time()
        self._release(run)
        run.store.discard_staging()  # what was staged and not committed is not a checkpoint
        run.rundir.write_error(run.errors if state == "FAILED" else None)
        run.rundir.close()
        self._write_state(run)
        self._event(run, {"kind": "state", "state": state, "message": _error_summary(run.errors)})
        self._to_clients(run, P.RUN_DONE, {
            "run_id": run.run_id, "name": run.name, "state": state, "errors": run.errors,
            "path": str(run.rundir.path), "metrics": run.last_metrics,
            "time_total_s": (run.ended - (run.started or run.submitted)),
            "failures": run.failures, "num_failures": run.num_failures, "attempt": run.attempt,
            "checkpoint": run.store.latest_path(), "checkpoints": run.store.records(),
            "checkpoint_config": run.spec.get("checkpoint_config"),
            "started": run.started, "ended": run.ended, "num_reports": run.reports,
        }, run.result)
        run.followers.clear()
        run.payload = []  # the function is not needed any more
        run.result = []
        self._prune_runs()

    def _prune_runs(self, keep: int = 1000) -> None:
        done = [r for r in self.runs.values() if r.state in ("FINISHED", "FAILED", "CANCELLED")]
        for r in done[:-keep] if len(done) > keep else []:
            del self.runs[r.run_id]

    def shutdown_nodes(self) -> None:
        for node in self.nodes.values():
            self.send(node.identity, P.SHUTDOWN, {})
        if self.local_node is not None:
            try:
                self.local_node.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.local_node.kill()
                self.local_node.wait()

    def close(self) -> None:
        self.sock.close(linger=500)  # let the last run_done messages reach their clients
        self.ctx.term()


def _unsaved_checkpoints(run: Run) -> str:
    """What a restart note adds when the failed attempt reported checkpoints that were never
    committed because some ranks had not made those reports. Without it the note said "no
    checkpoint yet, starting over" to a user whose rank 0 had reported several (the common
    ``if rank == 0: report(..., checkpoint=...)`` pattern), with no word of why they were lost."""
    if not run.staged:
        return ""
    first = min(run.staged)
    behind = [r for r in range(run.world_size) if run.report_counts.get(r, 0) < first]
    text = (f" ({len(run.staged)} reported checkpoint(s) were not saved: rank(s) "
            f"{', '.join(map(str, behind))} had not made report {first}")
    if any(run.report_counts.get(r, 0) == 0 for r in behind):
        text += ("; a checkpoint is saved once every rank has made the report that carries it, "
                 "so call report() on every rank, passing checkpoint=None where there is none")
    return text + ")"


def _primary_error(errors: list) -> dict:
    """The failure that caused the others: a dead rank before the exceptions its
    peers then raised (a collective with a dead peer fails on every rank)."""
    for e in errors:
        if e.get("signal") or e.get("exitcode") is not None:
            return e
    return errors[0] if errors else {"message": "failed"}


def _describe_cause(e: dict) -> str:
    """'rank 2 died, SIGKILL', 'rank 0 exited with code 3', 'rank 1 raised ValueError: boom'."""
    if e.get("signal"):
        return f"rank {e.get('rank')} died, {e['signal']}"
    if e.get("exitcode") is not None:
        return f"rank {e.get('rank')} exited with code {e['exitcode']}"
    if e.get("exc_type"):
        return f"rank {e.get('rank')} raised {e['exc_type']}: {e.get('message', '')}"
    return e.get("message", "failed")


def _error_summary(errors: list) -> str | None:
    """One line naming the first failure, e.g. 'rank 2 raised ValueError: boom'."""
    if not errors:
        return None
    e = errors[0]
    if e.get("exc_type"):
        line = f"rank {e.get('rank')} raised {e['exc_type']}: {e.get('message', '')}"
    else:
        line = e.get("message", "")
    return line + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else "")


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m raynb.head")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--max-workers", type=int, default=None)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--daemon", action="store_true", help="fork into the background first")
    ap.add_argument("--token", default="", help="written into the connection file for the starter")
    args = ap.parse_args(argv)
    if args.daemon and os.fork() > 0:
        os._exit(0)  # the launcher exits; the head is adopted by init and outlives its starter
    logging.basicConfig(level=logging.INFO, format="%(asctime)s head %(levelname)s %(message)s")
    key = P.key_from_env()
    head = Head(key, args.host, args.port, args.workers, args.max_workers)
    stop = lambda *_: setattr(head, "_stop", True)  # noqa: E731
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    head.start_local_node()
    head.connection_info = {
        "address": head.address, "key": key.decode(), "workers": args.workers,
        "pids": {"head": os.getpid(), "node": head.local_node.pid},
        "created": time.time(), "version": P.PROTOCOL_VERSION, "token": args.token,
    }
    write_connection_file(head.connection_info)
    log.info("head listening on %s", head.address)
    try:
        head.serve()
    finally:
        remove_connection_file()
        head.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
