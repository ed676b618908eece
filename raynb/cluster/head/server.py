"""The head's server: one thread around one ROUTER socket.

Every peer (client, node agent, worker) is a DEALER that names itself with its
routing id. Each message is verified (``protocol.Session``) before anything of it
is used, then dispatched by type to a handler here; a handler updates the
registry, asks the scheduler where to start runs, and turns what happened to a
run into an event of its controller. A tick every ``TICK_S`` enforces grace
periods, flushes run files and watches the node agents.
"""

from __future__ import annotations

import logging
import signal
import time

import zmq

from ..connection_file import remove_connection_file
from ..protocol import chunking, event_batch, messages, signing
from ..protocol import curve_auth as curve
from ..protocol.dispatch import bind
from . import disconnects, elastic, idle_stop, progress_relay, scheduler
from .client_outbox import ClientOutbox
from .client_requests import ClientRequests
from .controller import RunController
from .data_gate import DataGate, send_if_connected
from .handlers import HANDLERS
from .idle_stop import IdleStop
from .jobs import Jobs
from .local_node import LOCAL_NODE_ID, LocalNode
from .loop_stall import LoopWatch, discount
from .node_events import NODE_TIMEOUT_S, NodeEvents, RefusalLog  # noqa: F401 - NODE_TIMEOUT_S: its old home
from .node_pace import NodePace
from .offloop import OffLoop
from .pool import DEFAULT_IDLE_TIMEOUT_S, WorkerPool
from .queue import RunQueue
from .registry import Registry
from .run import TERMINAL, Run
from .run_records import RunRecords
from .run_resume import ResumedRuns
from .store import RunRefused, RunStore
from .tick_pacer import TickPacer
from .transfers import Transfers

log = logging.getLogger("raynb.head")

TICK_S = 0.1


class Head(NodeEvents, ClientRequests, RunRecords, ResumedRuns):
    """Args:
    key: the cluster's HMAC key.
    bind_host: interface to listen on (127.0.0.1 unless nodes join from other hosts).
    port: TCP port, 0 for a free one.
    num_workers: workers the local node keeps warm.
    max_workers: the most workers the local node may hold (None: its default).
    idle_timeout_s: how long a worker beyond its node's warm count may stay idle
        before it is retired (``pool.WorkerPool``).
    curve_keys: ``curve.new_keys()``; made here when ``bind_host`` is not loopback
        (every link off loopback is CurveZMQ), None on loopback.
    """

    def __init__(
        self,
        key: bytes,
        bind_host: str = "127.0.0.1",
        port: int = 0,
        num_workers: int = 4,
        max_workers: int | None = None,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        curve_keys: dict | None = None,
    ):
        self.key = key
        self.session = messages.Session(key, validate=True)
        self._open_router(bind_host, port, curve_keys)
        self.num_workers = num_workers
        self.max_workers = max_workers
        self.registry = Registry(max_workers)
        self._write_failures: list[Run] = []  # failed at the next tick, outside any handler
        self.store = RunStore(self.emit, self._write_failures.append)
        self.controller = RunController(self, self.store)
        self.queue = RunQueue(self.registry, self.runs, self.send, self.emit, self.controller, self.send_each)
        self.pool = WorkerPool(self.registry, self.send, self._note, idle_timeout_s)
        self.pace = NodePace(self.registry, self.send)  # idle remote nodes heartbeat less often
        self.local_node: LocalNode | None = None
        self.connection_info: dict | None = None  # written to the connection file by main()
        self.started = time.time()
        self._stop = False
        self.idle_stop = IdleStop()  # `shutdown` with when_idle: a script's cluster others use
        self._next_schedule = 0.0
        self.outbox = ClientOutbox(self._send_now)  # a client's run messages: once per drain
        self.offloop, self.loop_watch = OffLoop(), LoopWatch()  # work that grows with user data; stalls
        self._resuming: set[str] = set()  # run directories being read to resume (run_resume)
        self.queue.gate = DataGate(
            self.registry,
            self.runs,
            send_if_connected(self.sock, self.session, self.outbox.flush),
            lambda run, placement: self.queue._start(run, placement, gated=True),
            self.requeue,
            self.controller.no_room,
        )
        self.transfers = Transfers(self)  # checkpoints streamed from nodes without the storage
        self.refusal_log = RefusalLog()  # head.log's lines for refused peers, rate-limited
        self.jobs = Jobs(self.send, self.offloop)  # `raynb submit` drivers, unpacked off the loop
        self.handlers = bind(self, HANDLERS)  # the head's one table (head/handlers.py)
        self.store.load_archive()

    def _open_router(self, bind_host: str, port: int, curve_keys: dict | None) -> None:
        """The ROUTER every peer talks to, bound, with CurveZMQ off loopback and its
        disconnect watch; sets ``ctx``, ``sock``, ``curve_keys``, ``gatekeeper``,
        ``disconnects`` and ``address``."""
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        messages.configure_socket(self.sock)
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
        if curve_keys is None and curve.needed(bind_host):
            curve_keys = curve.new_keys()
        self.curve_keys = curve_keys
        self.disconnects = disconnects.Disconnects()  # a node's closed connection: lost sooner
        closed = self.disconnects.fd_closed
        self.gatekeeper = curve.Gatekeeper(self.ctx, self.sock, curve_keys, closed) if curve_keys else None
        if self.gatekeeper is None:
            self.disconnects.watch(self.sock)
        if port:
            self.sock.bind(f"tcp://{bind_host}:{port}")
        else:
            port = self.sock.bind_to_random_port(f"tcp://{bind_host}")
        self.address = f"tcp://{bind_host}:{port}"

    @property
    def runs(self) -> dict[str, Run]:
        return self.store.runs

    # -- plumbing ---------------------------------------------------------------
    def send(self, identity: bytes, msg_type: str, content: dict | None = None, buffers=()):
        if self.outbox.waiting(identity):
            self.outbox.flush(identity)  # what was queued for this client goes first
        self._send_now(identity, msg_type, content, buffers)

    def send_each(self, msg_type: str, items: list, buffers=()) -> None:
        """``Session.send_each``: to peers with no queued client messages (workers)."""
        self.session.send_each(self.sock, msg_type, items, buffers)

    def _send_now(self, identity: bytes, msg_type: str, content: dict | None = None, buffers=()):
        try:
            self.session.send(self.sock, msg_type, content, buffers, identity=identity)
        except zmq.ZMQError as e:
            log.warning("could not send %s to %r: %s", msg_type, identity, e)

    def start_local_node(self, on_start=lambda pid: None) -> None:
        self.local_node = LocalNode(
            self.address,
            self.key,
            self.num_workers,
            self.max_workers,
            on_start,
            curve.client_part(self.curve_keys),
        )
        self.local_node.start()

    def serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.offloop.wake_fd, zmq.POLLIN)
        pacer = TickPacer(TICK_S)
        while not self._stop:
            wait_ms = pacer.poll_ms(now := time.monotonic())
            busy = self.loop_watch.polling(now, wait_ms)  # a slow drain or tick: a stall of the head's
            ready = poller.poll(wait_ms)
            if stall := self.loop_watch.polled(now := time.monotonic()) or busy:
                discount(self.registry, stall, now)  # peers are not held to the head's own silence
            if self.offloop.drain():  # replies of work done off the loop (run_records, jobs)
                self.outbox.flush()
            if ready:
                for _ in range(1000):  # drain what is there, then tick
                    if self._stop:
                        break  # stopping: what is left is not answered as if the head stayed
                    try:
                        frames = messages.recv_frames(self.sock, zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._receive(frames)
                # The ranks started have their tasks (sent as they were placed): now their files,
                # before their clients hear of them (an end in this drain among them).
                self.store.write_after_start()
                self.outbox.flush()
            if pacer.due(time.monotonic()):  # its duties are all timed: not after every drain
                self.tick()
                self.outbox.flush()
        if self.connection_info is not None:
            remove_connection_file()  # stopping: a client arriving now starts a fresh cluster
        for run in list(self.runs.values()):
            self.controller.head_stopping(
                run,
                "the raynb cluster was stopped (`raynb stop`, or the "
                "head got SIGTERM) while this run was active",
            )
        self.outbox.flush()
        self.shutdown_nodes()

    def _receive(self, frames) -> None:
        identity = frames[0].bytes
        before = self.session.rejected
        msg = self.session.accept(frames[1:], identity)  # counted and logged when rejected
        if msg is None:
            if self.session.rejected != before:
                self.refuse_peer(identity)  # a wrong key or version: say which
            return  # rejected (counted, logged), or a piece of a chunked message (kept)
        if identity.startswith(b"node:"):
            self.registry.seen(identity)
            if (node := self.registry.node_of(identity)) is not None:
                self.disconnects.heard(node.node_id, frames[0])
        elif identity.startswith(b"worker:"):
            self.registry.worker_seen(messages.routing_name(identity), identity, time.monotonic())
        elif identity.startswith(b"client:"):
            self.outbox.heard(identity, msg.header.get("version"))
            if msg.msg_type in idle_stop.USE:
                self.idle_stop.client_heard(identity, time.monotonic())
        handler = self.handlers.get(msg.msg_type)
        if handler is None:
            log.warning("unexpected %s from %r", msg.msg_type, identity)
            return
        try:
            handler(msg)
        except Exception:  # noqa: BLE001 - one bad request must not take the cluster down
            log.exception("error handling %s from %r", msg.msg_type, identity)
            if identity.startswith(b"client:"):
                self.send(
                    identity,
                    messages.ERROR,
                    {"message": f"the head failed to handle {msg.msg_type}; see head.log in RAYNB_HOME"},
                )

    def tick(self) -> None:
        now = time.monotonic()
        self.session.rejects.flush(due_only=True)
        self.refusal_log.flush(now)
        self.lose_exited_ranks(now)
        for run in self.store.ticking():  # not the ended runs kept for raynb.runs()
            self.controller.tick(run)
            progress_relay.flush(run, self.emit, due_only=True)
            if run.state not in TERMINAL:
                self.store.flush(run)
        while self._write_failures:  # a run whose files cannot be written fails, not the head
            self.controller.storage_failed(self._write_failures.pop(0))
        self.pace.busy_changed(self.pool.tick(now, runs_waiting=len(self.queue) > 0), now)
        self.queue.gate.tick(now)
        if len(self.queue) and now >= self._next_schedule:  # a run waiting for room times out
            self._next_schedule = now + 1.0
            self.schedule()
        self.watch_nodes(now)
        if self.idle_stop.owners is None:
            self.idle_stop.forget_quiet(now)
        elif self._in_use(now) is None:  # (which forgets the quiet clients too)
            log.info("stopping: the stop asked when idle is due (no other client uses the cluster)")
            self._stop = True

    # -- clients (their requests: client_requests.py) ---------------------------
    def on_shutdown(self, msg: messages.Message) -> None:
        if msg.content.get("when_idle"):  # idle_stop.py: stop once no other client uses it
            self.idle_stop.ask(
                [msg.identity, *(o.encode() for o in msg.content.get("owners") or () if isinstance(o, str))]
            )
            busy = self._in_use(time.monotonic())
            if busy is not None:
                log.info("a stop when idle is asked; waiting for %s", busy)
                return self.send(
                    msg.identity,
                    messages.STATUS_REPLY,
                    {"stopping": False, "in_use": busy, "kept": self.idle_stop.kept},
                )
        log.info("shutdown requested")
        self.send(msg.identity, messages.STATUS_REPLY, {"stopping": True})
        self._stop = True

    def _in_use(self, now: float) -> str | None:
        self.jobs.poll()
        return self.idle_stop.in_use(self.store.ticking(), len(self.jobs.procs), now)

    def on_submit_run(self, msg: messages.Message) -> None:
        spec = dict(msg.content)
        n = spec.get("num_workers")

        def refuse(message: str) -> None:
            self.send(msg.identity, messages.ERROR, {"run_id": spec.get("run_id"), "message": message})

        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            return refuse(f"num_workers must be a positive integer, got {n!r}")
        why = elastic.problem(spec) or self.with_cause(
            scheduler.check(
                elastic.submit_request(spec),
                self.registry.snapshot(),
                self.registry.capacity(),
                self.registry.total_gpus(),
            )
        )
        if why:
            return refuse(why)
        if not msg.buffers:
            return refuse("submit_run carries no function")
        if spec.get("resume"):
            return self.submit_resumed(msg, spec)  # its files read off the loop (run_resume)
        self.accept_run(msg, spec)

    def accept_run(self, msg: messages.Message, spec: dict, resumed=None) -> None:
        """Create a submitted run (``resumed``: its directory as read, ``run_resume``),
        queue it and answer its client; a refusal is the submit's ``error``."""
        try:
            run = self.store.create(
                spec, msg.identity, signing.Payload(msg.buffers), chunking.view(msg.buffers[0]), resumed
            )
        except RunRefused as e:
            return self.send(msg.identity, messages.ERROR, {"run_id": spec.get("run_id"), "message": str(e)})
        self.queue.add(run)
        # Queued (client_outbox): the client hears of it once the drain ends, after its
        # ranks got their tasks (schedule, below), which is what it waits for.
        self.outbox.put(
            msg.identity,
            messages.RUN_ACCEPTED,
            {"run_id": run.run_id, "name": run.name, "path": str(run.rundir.path)},
        )
        self.emit(run, {"kind": "state", "state": "PENDING"})
        self.schedule()

    # -- run events -------------------------------------------------------------
    def _rank_of(self, msg: messages.Message, run: Run) -> int | None:
        """The rank a worker's message speaks for, if the sender holds it in this attempt."""
        rank = msg.content["rank"]
        if not (0 <= rank < len(run.ranks)) or run.ranks[rank] != messages.routing_name(msg.identity):
            return None  # a late message from a rank of an earlier attempt
        return rank

    def on_task_event(self, msg: messages.Message) -> None:
        c = msg.content
        run = self.runs.get(c["run_id"])
        if run is None or run.state not in ("RUNNING", "CANCELLING", "FAILING"):
            return
        rank = self._rank_of(msg, run)
        if rank is None:
            return
        event = c["event"]
        event["rank"] = rank
        kind = event.get("kind")
        if kind == "blocked":  # its cancel did not stop it: stuck in a collective? (Worker._cancel)
            return self.controller.rank_blocked(run, rank)
        if kind == "replace_workers":  # ranks set up for other peers (raynb.train.tensorflow)
            ranks = [r for r in event.get("ranks") or () if isinstance(r, int) and 0 <= r < len(run.ranks)]
            return self.controller.replace_ranks(run, ranks, str(event.get("text") or "workers replaced"))
        if kind == "output" and isinstance(event.get("text"), str):
            self.store.output(run, rank, event["text"], event.get("stream"))
        elif kind == "report" and isinstance(event.get("metrics"), dict):
            gated = event.pop("gated", None)  # the rank holds in report() for the head's word
            if gated and self.controller.grow_monitor is not None:
                self.controller.grow_monitor.held(run, rank, event.get("index") or 0)
            self.store.report(run, rank, event)
            progress_relay.relay(run, rank, event, self.emit)  # rank 0's whole, the others' counted
            index = run.report_counts.get(rank, 0)
            staged = index in run.staged
            if run.staged:
                self.store.commit_checkpoints(run)
            if "_grow" in run.spec and self.controller.grow_monitor is not None:  # head/elastic.py
                self.controller.grow_monitor.on_report(run, index, staged and index not in run.staged)
            return
        self.emit(run, event)

    def on_task_events(self, msg: messages.Message) -> None:
        """A burst of a rank's events (``task_events``), or those riding in its ``task_done``
        (worker_link), each handled as if it came alone: one that fails is logged and the
        others, and the rank's end, still count."""
        for event in event_batch.unbatch(msg):
            try:
                self.on_task_event(event)
            except Exception:  # noqa: BLE001
                log.exception(
                    "error handling an event of run %s's rank %s", msg.content["run_id"], msg.content["rank"]
                )

    def on_task_done(self, msg: messages.Message) -> None:
        self.on_task_events(msg)  # its last events, sent with it
        c = msg.content
        run = self.runs.get(c["run_id"])
        worker = self.registry.workers.get(messages.routing_name(msg.identity))
        if worker is not None and worker.run_id == c["run_id"]:
            worker.run_id = worker.rank = None
        if worker is not None and c.get("kind"):
            self.registry.set_kind(worker, c["kind"])
        rank = self._rank_of(msg, run) if run is not None else None
        if rank is not None:
            if c["status"] != "ok" and worker is not None and run.world_size > 1 and rank not in run.done:
                self.registry.forget_groups_with(worker.worker_id)  # see Worker.execute
            self.controller.rank_returned(run, rank, c["status"], c.get("error"), list(msg.buffers))
            if run.state not in TERMINAL and run.rundir.unwritten:
                self.store.flush(run)  # its rows while its other ranks end, not after the last
        self.schedule()

    # -- what the controller asks of the head (controller.Effects) ---------------
    def emit(self, run: Run, event: dict) -> None:
        progress_relay.flush(run, self.emit)  # the ranks' progress goes before what follows it
        event.setdefault("time", time.time())
        self._to_clients(run, messages.RUN_EVENT, {"run_id": run.run_id, "event": event})

    def _note(self, run_id: str, text: str) -> None:
        run = self.runs.get(run_id)
        if run is not None and run.state not in TERMINAL:
            self.emit(run, {"kind": "note", "text": text})

    def _to_clients(self, run: Run, msg_type: str, content: dict, buffers=()) -> None:
        for identity in (run.client, *run.followers):
            if identity:
                self.outbox.put(identity, msg_type, content, buffers)

    def cancel_rank(self, run: Run, rank: int) -> None:
        w = self.registry.workers.get(run.ranks[rank])
        if w is not None:
            self.send(w.identity, messages.CANCEL_TASK, {"run_id": run.run_id, "attempt": run.attempt})

    def kill_rank(self, run: Run, rank: int) -> bool:
        wid = run.ranks[rank]
        w = self.registry.workers.get(wid)
        if w is None:
            return False
        node = self.registry.nodes.get(w.node_id)
        if node is not None and node.node_id != LOCAL_NODE_ID and self.node_suspect(node, run.stopping_since):
            # Its host may be gone (a peer's gloo error came first): the rank ends with its
            # exit report if the node lives, else with the node's loss, which names it.
            self.send(node.identity, messages.KILL_WORKER, {"worker_id": wid, "signal": signal.SIGKILL})
            return False
        log.info("run %s: rank %d (pid %d) did not stop in time; killing it", run.name, rank, w.pid)
        w.run_id = w.rank = None
        self.registry.remove_worker(wid)  # gone for scheduling; its exit is reported later
        if node is not None:
            self.send(node.identity, messages.KILL_WORKER, {"worker_id": wid, "signal": signal.SIGKILL})
        return True

    def release(self, run: Run) -> None:
        """Give back the run's GPUs and workers (each still alive goes back to idle)."""
        for node_id, gpu_id in run.gpu_ids.values():
            self.registry.give_back_gpu(node_id, gpu_id)
        run.gpu_ids = {}
        for wid in run.ranks:
            w = self.registry.workers.get(wid)
            if w is not None and w.run_id == run.run_id:
                w.run_id = w.rank = None

    def requeue(self, run: Run) -> None:
        self.queue.add(run, front=True)
        self.schedule()

    def schedule(self) -> None:
        self.queue.schedule()

    def run_ended(self, run: Run) -> None:  # after the end's state event (progress went before it)
        self._to_clients(run, messages.RUN_DONE, run.done_content(), run.result)
        run.followers.clear()
        run.payload = []  # the function is not needed any more
        self.queue.gate.drop(run)  # a held attempt's reserved workers
        if run.spec.get("shared_data"):  # its shared-memory data on every node (none: no message)
            self.free_data(run.run_id)
        run.result = []
        self.store.prune()

    def on_release_data(self, msg: messages.Message) -> None:
        """A Tune experiment's shared-memory data is done with: every node frees it."""
        self.free_data(msg.content["key"])

    def on_worker_alive(self, msg: messages.Message) -> None:
        """A worker's heartbeat: ``_receive`` noted it was heard; nothing more to do."""

    def free_data(self, key: str) -> None:
        """Every node removes its shared-memory segments of ``key`` (a run, an experiment)."""
        self.pool.free_data(key)
        self.queue.gate.forget_key(key)

    # -- shutting down ----------------------------------------------------------
    def shutdown_nodes(self) -> None:
        for node in self.registry.nodes.values():
            self.send(node.identity, messages.SHUTDOWN, {})
        if self.local_node is not None:
            self.local_node.wait(timeout=5)

    def close(self) -> None:
        self.offloop.close()
        if self.gatekeeper is not None:
            self.gatekeeper.close(self.sock)
        self.disconnects.close(self.sock)
        self.sock.close(linger=500)  # let the last run_done messages reach their clients
        self.ctx.term()
