"""The node agent: one per machine. Owns the zygote, spawns/kills/reaps workers,
samples their CPU, memory and state, and tells the head about all of it.

A worker leads a process group with what its tasks started: killing a worker kills
the group. A zygote that dies takes its workers with it (they die with their
parent); the agent names it to the head for each of them, ends their groups and
starts a new zygote (at most ``ZYGOTE_RESTARTS_PER_MIN`` times a minute).

What this cannot end, without a cgroup (systemd's or one the agent could create): a
process a task had started through a daemon (``systemd-run``, ``docker run``, ``ssh``),
and, when the zygote or this agent is SIGKILLed, a task's processes that had moved to
a session of their own (``setsid``); with the agent SIGKILLed, its workers' groups too.

Run as ``python -m raynb.cluster.node.agent --address tcp://HEAD:PORT --workers N`` with the
cluster key in ``$RAYNB_KEY`` (the head does this for the local node). On other
machines ``raynb node`` runs ``launch.static.run_node``, which reads the key file,
checks the node's IP and GPUs, and serves a :class:`NodeAgent` in-process.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

import psutil
import zmq

from ..connection_file import private_dir
from ..procutil import ZYGOTE_MODULE, describe_exit, die_with_parent, end_groups, kill_group, python_env
from ..protocol import curve_auth as curve
from ..protocol import messages
from ..protocol.dispatch import bind
from ..protocol.rejects import refusal
from . import shm
from .data_server import DataServer
from .fork_requests import ForkRequests
from .gpu_stats import GpuSampler
from .head_watch import DISCONNECTED_S, HeadWatch
from .host import _local_ip_for, _rendezvous_dir, _workers_tmp_dir, node_cpus, parse_args, visible_gpus
from .kind_zygote import KINDS

log = logging.getLogger("raynb.node")

# The node agent's one handler table: each message a node agent receives -> its method
# (``protocol/dispatch.py``; the catalog says which messages reach a node agent). Those of
# DATA_SOCKET_TYPES come on the data socket (data_server), all others from the head.
HANDLERS: dict[str, str] = {
    messages.SPAWN_WORKERS: "on_spawn_workers",
    messages.KILL_WORKER: "on_kill_worker",
    messages.RETIRE_WORKER: "on_retire_worker",
    messages.SHUTDOWN: "on_shutdown",
    messages.FREE_DATA: "on_free_data",
    messages.PONG: "on_pong",
    messages.DATA_PUT: "data.on_put",
}
DATA_SOCKET_TYPES = frozenset({messages.DATA_PUT})
STATS_INTERVAL_S = 1.0
# The longest interval between stats the agent takes from the head's ``stats_every`` (s):
# the head asks for fewer heartbeats from an idle node (``head/node_pace.py``).
MAX_STATS_INTERVAL_S = 10.0
# A node's stats ask the head for a pong (its sign of life) only when the agent has not heard
# from it for this long (s; times the interval over STATS_INTERVAL_S while the head asked for
# fewer), or a quarter of the grace it gives a silent head if less.
STATS_REPLY_S = 5.0
# The head answers every stats message. Once it is gone (``head_watch``: its process ended,
# its connection closed, or silent past RAYNB_HEAD_GRACE_S and not known alive) this node
# ends its workers and exits, or (a node on another host, ``reconnect_s`` > 0) registers
# again each second for up to ``reconnect_s`` (``RECONNECT_S``, 60 s by default).
HEAD_TIMEOUT_S = DISCONNECTED_S  # its old name
RECONNECT_S = 60.0
# A retired worker (SIGTERM) still there after this long is killed (SIGKILL).
RETIRE_GRACE_S = 3.0
ZYGOTE_RESTARTS_PER_MIN = 3
# psutil states of a process that runs no code until someone resumes it.
FROZEN_STATES = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)


class NodeAgent:
    """Args:
    address: the head's ZeroMQ address (``tcp://host:port``).
    key: the cluster's HMAC key.
    num_workers: workers to keep warm on this node.
    max_workers: the most workers this node will hold; more is refused.
    curve_keys: the cluster's Curve client keys (``curve``), None on loopback.
    node_ip: the IP this node registers (its workers' stores and gloo bind to it);
        None: the address of the interface that routes to the head.
    gpus: CUDA device indices its workers may use (None: every visible one).
    shared_storage: this host mounts the head's ``storage_path`` at the same path
        (else its ranks stream their checkpoints to the head).
    reconnect_s: how long to keep registering again after losing the head (0: exit).
    cpus: the cores its workers may use, as reported to the head (None: this
        process's CPU affinity); a launcher that reserved cores (Ray) passes its share.
    labels: ``{name: value}`` strings shown by ``raynb status`` (the Ray node id).
    note: the first line ``raynb status`` shows for this node (e.g. that it got fewer
        CPUs than asked), until the zygote has news.
    head_pid: the head's pid when it runs on this machine (``head_watch``).
    """

    def __init__(
        self,
        address: str,
        key: bytes,
        num_workers: int,
        max_workers: int,
        node_id: str | None = None,
        curve_keys: dict | None = None,
        node_ip: str | None = None,
        gpus: list | None = None,
        shared_storage: bool = True,
        reconnect_s: float = 0.0,
        *,
        cpus: int | None = None,
        labels: dict[str, str] | None = None,
        note: str | None = None,
        head_pid: int | None = None,
    ):
        self.address, self.key = address, key
        self.num_workers, self.max_workers = num_workers, max_workers
        self.node_id = node_id or f"n{uuid.uuid4().hex[:6]}"
        self.hostname = socket.gethostname()
        self.ip = node_ip or _local_ip_for(address)
        self.curve_keys = curve_keys
        self.gpu_ids = visible_gpus() if gpus is None else list(gpus)
        self.shared_storage, self.reconnect_s = shared_storage, reconnect_s
        self.refused: str | None = None  # the head's refusal notice, if it sent one
        self.head_watch = HeadWatch(head_pid)  # a head gone, not one busy
        self.session = messages.Session(key, validate=True)
        self.ctx = zmq.Context()
        self._connect()
        self.data = DataServer(
            self.ctx, self.key, self.ip, self.node_id, curve_keys
        )  # segments from other hosts
        self.handlers = bind(self, HANDLERS)
        self.head_forgot = False  # a pong said the head does not know this node
        # Seconds between stats, as the head last asked (a pong's stats_every); a faster ask
        # sends one at once (stats_now), the head's sign that this node is there.
        self.stats_every, self.stats_now = STATS_INTERVAL_S, False
        self.workers: dict[int, str] = {}  # pid -> worker_id
        self.procs: dict[int, psutil.Process] = {}
        self.gpus = GpuSampler()  # off (no columns) without an NVIDIA driver
        self._retiring: dict[int, float] = {}  # pid -> when to SIGKILL it
        self._next_index = 0
        self.forks = ForkRequests()
        self._stop, self._zygote_starts = False, []  # (zygote starts: monotonic times)
        self.note: str | None = note  # what went wrong with the zygote, for `raynb status`
        self.cpus, self.labels = cpus, dict(labels or {})
        self.log_dir = private_dir("logs")
        self.rdzv_dir = _rendezvous_dir(self.node_id)
        self.tmp_dir = _workers_tmp_dir(self.node_id)
        shm.remove_stale()  # segments of agents that were SIGKILLed (cluster.shm)
        self._start_zygote()

    # -- zygote ----------------------------------------------------------------
    def _start_zygote(self) -> None:
        self.zygote = subprocess.Popen(
            [sys.executable, "-m", ZYGOTE_MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=python_env(
                {
                    "RAYNB_KEY": self.key.decode(),
                    "RAYNB_ADDRESS": self.address,
                    "RAYNB_NODE_ID": self.node_id,
                    "RAYNB_NODE_IP": self.ip,
                    "RAYNB_LOG_DIR": str(self.log_dir),
                    "RAYNB_RDZV_DIR": self.rdzv_dir,
                    "RAYNB_WORKERS_TMP": self.tmp_dir,
                    **curve.to_env(self.curve_keys),
                }
            ),
            preexec_fn=lambda: die_with_parent(signal.SIGKILL),
        )
        self._zbuf = b""
        self.forks.zygote_started()
        self._zygote_starts.append(time.monotonic())

    def _zygote_died(self) -> bool:
        """The zygote is gone, and its workers with it: tell the head, naming the zygote,
        for each of them; end what their tasks left; start a new zygote (the head asks it
        for the workers). False when it died too often to try again."""
        pid, died_at = self.zygote.pid, time.time()
        try:
            code = self.zygote.wait(timeout=2)
        except subprocess.TimeoutExpired:  # it closed its stdout but lives on: end it
            self.zygote.kill()
            code = self.zygote.wait()
        how = describe_exit(code, None) if code >= 0 else describe_exit(None, -code)
        why = f"the zygote (pid {pid}) died: {how}"
        for pipe in (self.zygote.stdin, self.zygote.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        end_groups(self.workers, died_at)
        for wpid, wid in self.workers.items():
            self.session.send(
                self.sock,
                messages.WORKER_EXITED,
                {
                    "worker_id": wid,
                    "pid": wpid,
                    "exitcode": None,
                    "signal": signal.SIGKILL,
                    "node_id": self.node_id,
                    "reason": f"was killed with its zygote: {why}",
                },
            )
        self.workers.clear()
        self.procs.clear()
        self._retiring.clear()
        now = time.monotonic()
        starts = sum(now - t < 60 for t in self._zygote_starts)
        if starts >= ZYGOTE_RESTARTS_PER_MIN:
            self.note = f"{why}; {starts} zygotes started in the last minute: the node agent stops"
            log.error("%s", self.note)
            return False
        self._start_zygote()
        self.note = f"{why}; a new zygote (pid {self.zygote.pid}) forks this node's workers"
        log.warning("%s", self.note)
        return True

    def _zygote_send(self, line: str) -> None:
        self.zygote.stdin.write(line.encode() + b"\n")
        self.zygote.stdin.flush()

    def spawn(self, count: int, kind: str = "torch") -> None:
        """Fork ``count`` workers of ``kind`` (``kind_zygote.KINDS``): those without room yet
        at the next exits (``fork_requests``)."""
        self.forks.ask(count, kind)
        self._fork_wanted()

    def _fork_wanted(self) -> None:
        for kind in self.forks.take(self.max_workers, len(self.workers)):
            self._next_index += 1
            suffix = "" if kind == "torch" else f" {kind}"
            self._zygote_send(f"spawn {self.node_id}-w{self._next_index}{suffix}")

    def _on_zygote_line(self, line: str) -> None:
        parts = line.split()
        if not parts:
            return
        if parts[0] == "ready":
            if len(self._zygote_starts) == 1:  # a new zygote's workers: the head asks for them
                log.info("zygote ready; spawning %d workers", self.num_workers)
                self.spawn(self.num_workers)
        elif parts[0] == "spawned":
            wid, pid = parts[1], int(parts[2])
            self.forks.spawned()
            self.workers[pid] = wid
            try:
                self.procs[pid] = psutil.Process(pid)
                self.procs[pid].cpu_percent(None)  # prime the counter
            except psutil.Error:
                pass
        elif parts[0] == "exited":
            pid, code, sig = int(parts[1]), int(parts[2]), int(parts[3])
            wid = self.workers.pop(pid, None)
            self.procs.pop(pid, None)
            self._retiring.pop(pid, None)
            if wid is not None:
                shutil.rmtree(os.path.join(self.tmp_dir, wid), ignore_errors=True)
                self.session.send(
                    self.sock,
                    messages.WORKER_EXITED,
                    {
                        "worker_id": wid,
                        "pid": pid,
                        "exitcode": code if not sig else None,
                        "signal": sig or None,
                        "node_id": self.node_id,
                    },
                )
                self._fork_wanted()  # its room: for a fork asked for while it lived

    def _read_zygote(self) -> bool:
        chunk = os.read(self.zygote.stdout.fileno(), 65536)
        if not chunk:
            return False
        self._zbuf += chunk
        *lines, self._zbuf = self._zbuf.split(b"\n")
        for line in lines:
            self._on_zygote_line(line.decode())
        return True

    # -- head ------------------------------------------------------------------
    def _connect(self) -> None:
        """A DEALER to the head (a fresh one, with a new routing id, after losing it:
        what the old one had queued is stale)."""
        self.sock = self.ctx.socket(zmq.DEALER)
        messages.configure_socket(self.sock)
        curve.secure_client(self.sock, self.curve_keys)
        self.sock.setsockopt(zmq.IDENTITY, messages.routing_id("node", self.node_id))
        self.sock.connect(self.address)

    def _register(self) -> None:
        self.session.send(
            self.sock,
            messages.NODE_REGISTER,
            {
                "node_id": self.node_id,
                "hostname": self.hostname,
                "ip": self.ip,
                "pid": os.getpid(),
                "num_workers": self.num_workers,
                "max_workers": self.max_workers,
                "gpus": self.gpu_ids,
                "cpus": self.cpus or node_cpus(),
                "shared_storage": self.shared_storage,
                "data_port": self.data.port,
                "data_key": self.data.public_key,
                "shm_id": shm.shm_id(),
                **({"labels": self.labels} if self.labels else {}),
            },
        )

    def _recv_head(self) -> messages.Message | None:
        """The head's next verified message; None for a rejected one or a chunk. A refusal
        notice (wrong key, other protocol version) is kept in ``refused``."""
        frames = messages.recv_frames(self.sock)
        why = refusal(frames)
        if why is not None:
            self.refused = why
            return None
        return self.session.accept(frames)

    def _lost_head(self) -> None:
        """End this node's workers (the head drops them too) and open a fresh socket."""
        for pid in list(self.workers):
            kill_group(pid, signal.SIGKILL)
        self.sock.close(0)
        self._connect()
        self.stats_every = STATS_INTERVAL_S  # a new registration: the head expects one a second
        self._register()

    def _on_head(self, msg: messages.Message) -> None:
        """Act on a verified message from the head, through the node's handler table
        (``HANDLERS``); a data-socket message is not taken from the head's."""
        handler = self.handlers.get(msg.msg_type)
        if handler is not None and msg.msg_type not in DATA_SOCKET_TYPES:
            handler(msg)

    def _on_data(self) -> None:
        """Take one message from the data socket: a client's ``data_put`` (data_server)."""
        msg = self.data.receive()
        if msg is not None and msg.msg_type in DATA_SOCKET_TYPES:
            self.handlers[msg.msg_type](msg)

    def on_spawn_workers(self, msg: messages.Message) -> None:
        kind = msg.content.get("kind") or "torch"
        if kind not in KINDS:
            log.warning("spawn_workers of unknown kind %r: forking torch workers", kind)
            kind = "torch"
        self.spawn(int(msg.content.get("count", 1)), kind)

    def on_kill_worker(self, msg: messages.Message) -> None:
        for pid in self._pids_of(msg.content["worker_id"]):
            kill_group(pid, int(msg.content.get("signal", signal.SIGKILL)))

    def on_retire_worker(self, msg: messages.Message) -> None:
        for pid in self._pids_of(msg.content["worker_id"]):
            kill_group(pid, signal.SIGTERM)  # an idle worker exits at once (Worker._on_sigterm)
            self._retiring[pid] = time.monotonic() + RETIRE_GRACE_S

    def on_shutdown(self, msg: messages.Message) -> None:
        self._stop = True

    def on_free_data(self, msg: messages.Message) -> None:
        self.data.drop_key(msg.content["key"])
        shm.free_key(self.node_id, os.getpid(), msg.content["key"])

    def on_pong(self, msg: messages.Message) -> None:
        """The head's answer to this node's stats: ``registered`` False means a head that
        does not know this node (it restarted at the same address with the same keys);
        ``serve`` starts over with it."""
        if msg.content.get("registered") is False:
            self.head_forgot = True
        every = msg.content.get("stats_every")
        if isinstance(every, (int, float)) and not isinstance(every, bool) and every == every:
            every = min(MAX_STATS_INTERVAL_S, max(STATS_INTERVAL_S, float(every)))
            self.stats_now = self.stats_now or every < self.stats_every
            self.stats_every = every

    def _pids_of(self, worker_id: str) -> list[int]:
        return [pid for pid, wid in self.workers.items() if wid == worker_id]

    def _kill_late_retirees(self) -> None:
        """SIGKILL a retired worker that did not exit (a frozen one: SIGTERM waits for SIGCONT)."""
        now = time.monotonic()
        for pid, deadline in list(self._retiring.items()):
            if now >= deadline:
                del self._retiring[pid]
                if pid in self.workers:
                    kill_group(pid, signal.SIGKILL)

    def _send_stats(self) -> None:
        stats = {}
        gpu = self.gpus.sample(self.procs) if self.gpus.enabled else {}
        for pid, proc in list(self.procs.items()):
            try:
                with proc.oneshot():
                    stats[self.workers[pid]] = {
                        "pid": pid,
                        "cpu_percent": proc.cpu_percent(None),
                        "rss": proc.memory_info().rss,
                        "frozen": proc.status() in FROZEN_STATES,
                        **gpu.get(pid, {}),
                    }
            except (psutil.Error, KeyError):
                continue
        self.session.send(
            self.sock,
            messages.NODE_STATS,
            {
                "node_id": self.node_id,
                "workers": stats,
                "zygote_pid": self.zygote.pid,
                "note": self.note,
                "load": os.getloadavg()[0],
                "reply": self._reply_wanted(time.monotonic()),
            },
        )

    def _reply_wanted(self, now: float) -> bool:
        """Whether this heartbeat asks the head for a pong: not while the head was heard
        from lately (a pong to every heartbeat of every node costs the head in proportion
        to its nodes; the grace on a silent head is many heartbeats long)."""
        watch = self.head_watch
        wait = STATS_REPLY_S * self.stats_every / STATS_INTERVAL_S
        return now - watch.last_heard >= min(wait, watch.grace_s / 4)

    def serve(self) -> int:
        """Register, then serve the head until it says shutdown (0), refuses this node
        (3), or is gone (``head_watch``) and, with ``reconnect_s``, the grace (1)."""
        self._register()
        poller = self._poller()
        watch = self.head_watch
        next_stats = time.monotonic() + STATS_INTERVAL_S
        lost_at: float | None = None
        try:
            while not self._stop:
                # at least once a second: a retired worker's SIGKILL is not put off by idle stats
                timeout = min(STATS_INTERVAL_S, max(0.0, next_stats - time.monotonic()))
                for sock, _ in poller.poll(timeout * 1000):
                    if watch.handle(sock, time.monotonic()):
                        continue
                    if sock is self.sock:
                        msg = self._recv_head()
                        if self.refused:
                            log.error("%s (head %s); this node agent exits", self.refused, self.address)
                            return 3
                        if msg is not None:
                            watch.heard(now := time.monotonic())
                            if lost_at is not None:
                                self._reconnected(now - lost_at)
                                lost_at = None
                            self._on_head(msg)
                            if self.head_forgot:  # on_pong: start over with this head
                                lost_at = self._start_over(poller)
                                break
                    elif sock is self.data.sock:
                        self._on_data()
                    elif not self._read_zygote():
                        if not self._zygote_died():
                            return 1
                        poller.unregister(sock)
                        poller.register(self.zygote.stdout.fileno(), zmq.POLLIN)
                        break
                now = time.monotonic()
                self._kill_late_retirees()
                if now >= next_stats or self.stats_now:
                    next_stats = self._stats_tick()
                why = watch.gone(now) if lost_at is None else None
                if why and self.reconnect_s <= 0:
                    log.error("%s (head %s): this node agent stops its workers and exits", why, self.address)
                    return 1
                if why:
                    self._lose_head(why, poller)
                    lost_at = now
                elif lost_at is not None and now - lost_at > self.reconnect_s:
                    log.error(
                        "the head at %s did not come back within %.0fs; this node agent exits",
                        self.address,
                        self.reconnect_s,
                    )
                    return 1
        finally:
            self.close()
        return 0

    def _poller(self) -> zmq.Poller:
        """A poller on the head's socket, the zygote's stdout, the data socket and the
        head watch."""
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.zygote.stdout.fileno(), zmq.POLLIN)
        poller.register(self.data.sock, zmq.POLLIN)
        self.head_watch.watch(self.sock, poller, time.monotonic())
        return poller

    def _reconnected(self, after_s: float) -> None:
        """The head answers again after ``after_s`` seconds lost: warm this node's workers again."""
        log.info(
            "reconnected to the head at %s after %.1fs; spawning %d workers",
            self.address,
            after_s,
            self.num_workers,
        )
        self.spawn(self.num_workers)

    def _start_over(self, poller: zmq.Poller) -> float:
        """The head forgot this node (it restarted?): end the workers and register again.
        Returns when the head was lost (``time.monotonic()``)."""
        self.head_forgot = False
        log.warning(
            "the head at %s does not know this node (it restarted?): "
            "ending this node's workers and registering again",
            self.address,
        )
        lost_at = time.monotonic()
        self._reconnect(poller)
        return lost_at

    def _lose_head(self, why: str, poller: zmq.Poller) -> None:
        """The head is gone (``why``): end the workers and register again, for up to
        ``reconnect_s``."""
        log.warning(
            "%s (head %s): ending this node's workers; registering again for up to %.0fs",
            why,
            self.address,
            self.reconnect_s,
        )
        self._reconnect(poller)

    def _stats_tick(self) -> float:
        """Send this node's stats; returns when the next are due (``time.monotonic()``)."""
        self._send_stats()
        self.stats_now = False
        return time.monotonic() + self.stats_every

    def _reconnect(self, poller: zmq.Poller) -> None:
        """End the workers, and register again on a fresh socket (``_lost_head``)."""
        poller.unregister(self.sock)
        self.head_watch.close(poller)
        self._lost_head()
        poller.register(self.sock, zmq.POLLIN)
        self.head_watch.watch(self.sock, poller, time.monotonic())

    def close(self) -> None:
        for pid in list(self.workers):
            kill_group(pid, signal.SIGKILL)  # each worker and what its task started
        try:
            self._zygote_send("exit")
        except (BrokenPipeError, ValueError):
            pass
        try:
            self.zygote.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.zygote.kill()
            self.zygote.wait()
        for pid in list(self.workers):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        shutil.rmtree(self.rdzv_dir, ignore_errors=True)
        shutil.rmtree(self.tmp_dir, ignore_errors=True)
        self.data.close()
        shm.free_agent(self.node_id, os.getpid())
        self.head_watch.close()
        self.sock.close(0)
        self.ctx.term()


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s node %(levelname)s %(message)s")
    if args.die_with_parent:
        die_with_parent(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    agent = NodeAgent(
        args.address,
        messages.key_from_env(),
        args.workers,
        args.max_workers,
        args.node_id,
        curve.from_env(),
        cpus=args.cpus,
        labels=dict(item.partition("=")[::2] for item in args.label),
        note=args.note,
        head_pid=args.head_pid,
    )
    return agent.serve()


if __name__ == "__main__":
    sys.exit(main())
