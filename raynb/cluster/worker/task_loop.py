"""A warm worker: forked from the zygote, runs training functions on its main thread.

The user's function runs on the main thread, so that a cancel can reach it as a
KeyboardInterrupt (a signal is only delivered to the main thread). The link to the
head (``worker_link``) is the main thread's between tasks, and an I/O thread's while
a task runs longer than a few milliseconds: it then forwards what the main thread
(and any thread of the user's) sends, sends the heartbeats, and turns a cancel into
SIGINT for the main thread.

Between runs a worker keeps its torch.distributed process group, so a re-run on
the same ranks skips the rendezvous entirely (``rendezvous.py``: how a group forms,
and what the worker listens on).
"""

from __future__ import annotations

import linecache
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time

import cloudpickle

from ..procutil import batch_scheduling, become_subreaper, end_descendants, trim_heap
from ..protocol import chunking, event_batch, messages
from ..protocol.dispatch import bind
from . import task_context, warning_registry
from .head_link import HeadLink, idle_heartbeat_s
from .library_state import LibraryState
from .module_reload import user_modules
from .notebook_main import load_payload, notebook_main
from .rank_output import OutputBatch, RankStream
from .remote_error import format_remote_error
from .rendezvous import IFNAME_VARS, Rendezvous
from .task_env import TaskEnv
from .thread_share import ThreadShare

log = logging.getLogger("raynb.worker")

# A cancelled task still running this long after its SIGINT (s) is inside a call no
# interrupt reaches (a collective with a dead peer, most likely): the head is told, and
# kills it at once when a peer died (controller.rank_blocked).
BLOCKED_AFTER_S = 0.03
# After a task whose function came with more than this (bytes), the C heap is trimmed.
TRIM_AFTER_BYTES = 16 << 20
# The worker's one handler table: each message the head sends a worker -> its method
# (``protocol/dispatch.py``; the catalog says which messages reach a worker).
HANDLERS: dict[str, str] = {
    messages.RUN_TASK: "on_run_task",
    messages.CANCEL_TASK: "on_cancel_task",
    messages.SET_THREADS: "on_set_threads",
    messages.CHECKPOINT_REQUESTED: "on_checkpoint_requested",
    messages.REPORT_GATE: "on_report_gate",
}
# What torch.distributed's env:// init reads, set for every task (in this order, _prepare).
RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")
# Set for the life of the process, not put back after a task (task_env): the rank's variables,
# the interfaces its process groups use (rendezvous), and a library's choice made once at its
# import (DeepSpeed's accelerator, tf-keras, the profiler's log level).
PROCESS_ENV = RANK_ENV + IFNAME_VARS + ("DS_ACCELERATOR", "TF_USE_LEGACY_KERAS", "KINETO_LOG_LEVEL")


class Worker:
    def __init__(self, worker_id: str, address: str, key: bytes):
        self.worker_id = worker_id
        self.address = address
        self.key = key
        self.node_id = os.environ.get("RAYNB_NODE_ID", "")
        self.node_ip = os.environ.get("RAYNB_NODE_IP", "127.0.0.1")
        self.tasks: queue.Queue = queue.Queue()
        self.idle_beat_s = idle_heartbeat_s()  # between tasks (head_link)
        self.lock = threading.Lock()
        self.current_task: dict | None = None
        self._cancel_requested = False
        self._interruptible = False
        # (run_id, attempt) cancelled before its task started here (or after it ended:
        # bounded, since most such cancels are for tasks that already returned).
        self._cancelled_early: dict[tuple, None] = {}
        self._main_ident = threading.get_ident()
        self.pid = os.getpid()
        self._modules = user_modules()
        self.threads = ThreadShare()
        # A run's env_vars, set from before its unpickling to its end; the environment as it was after.
        self.task_env = TaskEnv(keep=PROCESS_ENV)
        self.library_state = LibraryState()
        self._sys_path_seen: tuple = ()
        self._umask = os.umask(0o077)  # the worker's own, restored for every task (_prepare)
        os.umask(self._umask)
        self._env_left: tuple | None = None  # RANK_ENV's values as the last task left them
        self.rendezvous = Rendezvous(self.node_ip)
        self.kind = os.environ.get("RAYNB_WORKER_KIND") or "torch"  # what its zygote imported
        self.handlers = bind(self, HANDLERS)
        self.link = HeadLink(worker_id, address, key, self._dispatch)
        self.link.send(
            messages.WORKER_READY,
            {  # sent now: the main thread owns the link
                "worker_id": self.worker_id,
                "pid": os.getpid(),
                "node_id": self.node_id,
                "hostname": socket.gethostname(),
                "ip": self.node_ip,
                "store_port": self.rendezvous.store_port,
                **_own_stats(),
                # Forked from a kind's zygote (node/kind_zygote.py): the head places its kind's runs here.
                **({"kind": self.kind} if self.kind != "torch" else {}),
            },
        )
        self.link.start_io_thread()
        # The fallbacks are the zygote child's log-file streams, not sys.__stdout__: were
        # they dropped here, their file objects would be collected and close fds 1 and 2,
        # which the next socket opened (a gloo or ZeroMQ one) would then reuse, and idle
        # output would be written into it.
        self._output = OutputBatch(self)  # both streams' lines, in the order written
        self.streams = (
            RankStream(self, "stdout", sys.stdout, self._output),
            RankStream(self, "stderr", sys.stderr, self._output),
        )
        sys.stdout, sys.stderr = self.streams
        signal.signal(signal.SIGINT, self._on_sigint)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self.threads.install()  # a new share is taken between two lines of the function

    def forked(self) -> bool:
        """True in a process the user's code forked from this worker (a DataLoader worker).

        Such a child must not touch the worker's ZeroMQ sockets (their I/O thread does
        not exist there) nor its locks (one held by another thread at the fork stays
        held forever: the child's first print would hang). Its output goes to the
        worker's log file instead.
        """
        return os.getpid() != self.pid

    # -- outgoing (any thread) ------------------------------------------------
    def send(self, msg_type: str, content: dict, buffers=(), wait: bool = False) -> None:
        """Queue a message for the head (``HeadLink.send``: no signing or I/O here)."""
        self.link.send(msg_type, content, buffers, wait)

    def emit(self, event: dict, wait: bool = False) -> None:
        """Send a progress event (report, output) for the current task; ``wait``: return
        once it is on the socket (``HeadLink.send``)."""
        task = self.current_task
        if task is None or self.forked():
            return
        if event.get("kind") != "output":
            self._output.send()  # the lines printed before a report arrive before it
        event.setdefault("time", time.time())
        self.send(
            messages.TASK_EVENT, {"run_id": task["run_id"], "rank": task["rank"], "event": event}, wait=wait
        )
        if self.threads.pending and threading.get_ident() == self._main_ident:
            self.threads.apply()

    def _dispatch(self, msg: messages.Message) -> None:
        """Act on a verified message from the head (either thread, as the link's owner),
        through the worker's handler table (``HANDLERS``)."""
        handler = self.handlers.get(msg.msg_type)
        if handler is not None:
            handler(msg)

    def on_run_task(self, msg: messages.Message) -> None:
        """(I/O thread) the next task, come early: the main thread takes it."""
        self.tasks.put(msg)

    def on_cancel_task(self, msg: messages.Message) -> None:
        self._cancel(msg.content["run_id"], msg.content.get("attempt", 0))

    def on_set_threads(self, msg: messages.Message) -> None:
        c = msg.content
        self.threads.want((c["run_id"], c.get("attempt", 0)), int(c["num_threads"]))

    def on_checkpoint_requested(self, msg: messages.Message) -> None:
        """(I/O thread) a driver Callback's SHOULD_CHECKPOINT: read by the task's next step."""
        task_context.request_checkpoint(msg.content["run_id"], msg.content.get("attempt", 0))

    def on_report_gate(self, msg: messages.Message) -> None:
        """An elastic run about to grow: its reports hold for the head's word (task_context.set_gate)."""
        task, c = self.current_task, msg.content
        if task is not None and (task["run_id"], task.get("attempt", 0)) == (
            c["run_id"],
            c.get("attempt", 0),
        ):
            task_context.set_gate(c)

    def _cancel(self, run_id: str, attempt: int) -> None:
        # A restarted run keeps its run_id: the attempt tells a cancel of the failed
        # attempt from the new one, which must not be cancelled by it.
        with self.lock:
            task = self.current_task
            if task is not None and (task["run_id"], task.get("attempt", 0)) == (run_id, attempt):
                self._cancel_requested = True
                signal.pthread_kill(self._main_ident, signal.SIGINT)
                timer = threading.Timer(BLOCKED_AFTER_S, self._still_running, (task,))
                timer.daemon = True
                timer.start()
            else:
                self._cancelled_early[(run_id, attempt)] = None
                while len(self._cancelled_early) > 256:
                    del self._cancelled_early[next(iter(self._cancelled_early))]

    def _still_running(self, task: dict) -> None:
        """(a timer) Tell the head when the cancelled ``task`` is still inside its function
        (not once it returned or raised: formatting its error or ending its processes, it
        is stopping, and the head would kill it as blocked when a peer died)."""
        if self.current_task is task and self._interruptible:
            self.send(
                messages.TASK_EVENT,
                {
                    "run_id": task["run_id"],
                    "rank": task["rank"],
                    "event": {"kind": "blocked", "time": time.time()},
                },
            )

    def _on_sigint(self, signum, frame):
        # Only a cancel of the running task interrupts, and only while the task's
        # own code runs; a late SIGINT (the task already returned) is ignored.
        if self._cancel_requested and self._interruptible:
            self._interruptible = False  # once: a second SIGINT must not hit the handlers
            raise KeyboardInterrupt("run cancelled")

    def _on_sigterm(self, signum, frame):
        # The node agent retires an idle worker with SIGTERM: a clean exit. A busy one
        # dies of the signal, as it would without this handler (not the zygote's, which
        # it inherited and which would raise SystemExit into the user's function).
        if self.current_task is None:
            os._exit(0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    # -- the main thread ------------------------------------------------------
    def serve(self) -> int:
        while True:
            # No name holds the task across iterations: its message (the shipped function
            # and what it captured) is freed when execute() returns.
            msg = self._next_task()
            self.link.lend()
            try:
                self.execute(msg)
            except KeyboardInterrupt:  # outside the task's own code (execute() sends its end)
                log.warning(
                    "an interrupt escaped a task of run %s: its end was not sent", msg.content.get("run_id")
                )
            finally:
                self.link.take_back()
                self.link.send_queued()  # what the task queued, if it did not get to its end
            del msg

    def _next_task(self) -> messages.Message:
        """(main thread, owning the link) Wait for the head's next ``run_task``."""
        try:
            msg = self.tasks.get_nowait()  # come while the last task ran (the I/O thread's)
        except queue.Empty:
            msg = self.link.serve(
                lambda m: m is not None and m.msg_type == messages.RUN_TASK, beat_s=self.idle_beat_s
            )
        self.link.head_batches = event_batch.reads_batches(msg.header.get("version"))
        return msg

    def execute(self, msg: messages.Message) -> None:
        task = msg.content
        run_id, rank = task["run_id"], task["rank"]
        status, error, ret = "ok", None, None
        with self.lock:
            if self._cancelled_early.pop((run_id, task.get("attempt", 0)), False) is None:
                status = "cancelled"
            else:
                self.current_task = task
                self._cancel_requested = False
        # The previous task may have closed or replaced sys.stdout / sys.stderr.
        for stream in self.streams:
            stream.reopen()
        sys.stdout, sys.stderr = self.streams
        started_ns = time.time_ns()
        shipped_bytes = 0
        if status == "ok":
            shipped_bytes = len(chunking.view(msg.buffers[0])) if msg.buffers else 0
            try:
                ret = self._call(task, msg)
            except task_context.StopAttempt:  # the head stopped the attempt at a report (elastic grow)
                status = "cancelled"
            except KeyboardInterrupt as exc:
                status = "cancelled" if self._cancel_requested else "error"
                if status == "error":  # raised by the user's code itself: keep its message and traceback
                    error = format_remote_error(exc, rank)
            except BaseException as exc:  # noqa: BLE001 - SystemExit too: the worker lives on
                status, error = "error", format_remote_error(exc, rank)
            finally:
                self._end_task(run_id, status)
        buffers = []
        if status == "ok" and ret is not None and rank == 0:
            try:
                buffers = _pickled_return(ret)
            except Exception as exc:  # noqa: BLE001
                status, error = (
                    "error",
                    format_remote_error(
                        TypeError(f"the training function's return value could not be sent back: {exc}"), rank
                    ),
                )
        if status != "ok" and task["world_size"] > 1:
            # Peers may be mid-collective or dead: never reuse this process group. A
            # one-rank group has no peers and stays usable (a Tune STOP then costs no
            # new group for the worker's next trial).
            self.rendezvous.group_key = None
        self.link.take_back()  # the end goes from this thread, with the events before it
        done = {"run_id": run_id, "rank": rank, "status": status, "error": error, **self._kind_changed()}
        self.send(messages.TASK_DONE, done, buffers)
        del buffers, ret
        if shipped_bytes > TRIM_AFTER_BYTES:
            trim_heap()  # what the payload's transfer left in malloc's arenas goes back too
        self._modules.note(started_ns)
        # Read now, the task's end sent: the next task's start compares one tuple with it.
        self._env_left = tuple(map(os.environ.get, RANK_ENV))

    def _end_task(self, run_id: str, status: str) -> None:
        """What ends with every task that ran, whatever its status: its output flushed, the
        task context's at_end functions, and the worker's state as it was before it."""
        for stream in self.streams:
            stream.drain()
        with self.lock:
            self.current_task = None
            self._cancel_requested = False
        task_context.end(status)
        # After the task's at_end functions (an MLflow run's end sets its variables back):
        # a warm worker serves other runs next, in the environment it had before. A run
        # left open ends first, while the task's tracking URI is still set.
        self.library_state.restore(status)
        self.task_env.restore()
        self.threads.end()
        # What the task started (a subprocess, a fork, a DataLoader's workers) ends
        # with it, as on cancel: nothing of a run outlives it.
        killed = end_descendants()
        if killed:
            log.info("run %s: ended %d process(es) it left: %s", run_id, len(killed), killed)

    def _kind_changed(self) -> dict:
        """``{"kind": ...}`` for the task's end when the task changed this worker's kind: a
        torch worker whose function imported TensorFlow keeps it (its native library stays
        loaded), so it is a ``tensorflow`` worker from then on and torch runs go elsewhere.
        An import interrupted by a cancel leaves no ``tensorflow`` but its submodules (and the
        library) behind: any of them counts."""
        if self.kind == "torch" and any(n.partition(".")[0] == "tensorflow" for n in list(sys.modules)):
            self.kind = "tensorflow"
            return {"kind": self.kind}
        return {}

    def _call(self, task: dict, msg: messages.Message):
        """Run the task's function; what it returned. Only while inside may a cancel's
        SIGINT interrupt it: one landing while its error was formatted (a peer's death,
        then the head's cancel) raised out of execute() and lost the task's end."""
        self._interruptible = True
        try:
            self._prepare(task)
            frames, msg.buffers = msg.buffers, []  # the payload frame: read in place, then freed
            try:
                payload, shipped = load_payload(chunking.view(frames[0]))
            except ImportError as e:
                raise ModuleNotFoundError(
                    f"the training function could not be loaded on this worker: {e}. It uses a "
                    "module the notebook can import but the workers cannot (they get the "
                    "notebook's working directory and sys.path); install it on every node, or "
                    "ship it with cloudpickle.register_pickle_by_value(module)",
                    name=e.name,
                ) from None
            del frames
            for filename, source in payload.get("sources", {}).items():
                linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            task_context.start(task, self.emit)
            fn, config = payload["fn"], payload["config"]
            del payload
            warning_registry.keep_registries((fn, config))  # once per location per process
            with notebook_main(shipped):  # torch.save(model) finds __main__.Net
                return fn(config) if task_context.takes_config(fn) else fn()
        finally:
            self._interruptible = False

    def _prepare(self, task: dict) -> None:
        # Before the payload is unpickled: a module the function imports reads them then.
        self.task_env.set(task.get("env"))
        self.library_state.note()
        group = task["group"]
        values = tuple(
            map(
                str,
                (
                    task["rank"],
                    task["world_size"],
                    task["local_rank"],
                    task["local_world_size"],
                    task["node_rank"],
                    group["master_addr"],
                    group["master_port"],
                ),
            )
        )
        # Set again at this task's end (execute): one that never got there (an interrupt
        # escaped it) leaves nothing to compare with, and the next task sets them all.
        left, self._env_left = self._env_left, None
        if values != left:  # a re-run on the same ranks sets none (putenv)
            for name, value in zip(RANK_ENV, values):
                if os.environ.get(name) != value:
                    os.environ[name] = value
        cwd = task.get("cwd")
        if cwd:
            try:
                here = os.getcwd()
            except OSError:  # the directory the last task left it in was removed since
                here = None
            if here != cwd and os.path.isdir(cwd):
                os.chdir(cwd)
        # As the cwd: a task's os.umask(0) made every later run's files on this warm worker
        # world-writable (another notebook's among them).
        os.umask(self._umask)
        paths = tuple(task.get("sys_path") or ())
        if paths != self._sys_path_seen:
            for p in reversed(paths):
                if p not in sys.path and os.path.isdir(p):
                    sys.path.insert(0, p)
            # Not seen while one is missing: the client sends a directory it saw once
            # (shipping.sys_path_dirs), so one recreated later is added then.
            self._sys_path_seen = paths if all(p in sys.path for p in paths) else ()
        self._modules.reload_changed()
        # The head's share of the node's cores (see thread_share); the function's own
        # torch.set_num_threads still wins, it runs after this.
        self.threads.start(
            (task["run_id"], task.get("attempt", 0)),
            task.get("num_threads") or max(1, (os.cpu_count() or 1) // max(1, task["local_world_size"])),
        )
        self.rendezvous.ensure(task, self.worker_id)


def _pickled_return(ret) -> list:
    """The training function's return value as one message buffer (rank 0's, sent back).
    Raises ValueError when it is over what a message may carry, pickle's errors else."""
    data = cloudpickle.dumps(ret, protocol=5)
    size, limit = len(data), messages.max_message_bytes() - (1 << 20)
    if size > limit:
        del data  # not kept alive by the error's traceback while the error is sent
        raise ValueError(
            f"it pickles to {size / 2**20:.0f} MiB, over the {limit / 2**20:.0f} MiB a "
            "message may carry; save it to a file instead, or raise "
            "RAYNB_MAX_MESSAGE_BYTES before `raynb start`"
        )
    return [data]


def _own_stats() -> dict:
    """This process's CPU % (over its life so far) and RSS, for WORKER_READY: `raynb status`
    right after a start showed '-' until the node agent's first sample, a second later."""
    try:
        import psutil

        proc = psutil.Process()
        with proc.oneshot():
            t, age = proc.cpu_times(), max(1e-3, time.time() - proc.create_time())
            return {"cpu_percent": round(100.0 * (t.user + t.system) / age, 1), "rss": proc.memory_info().rss}
    except Exception:  # noqa: BLE001 - stats are a nicety; the node agent's samples follow
        return {}


def main(worker_id: str) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(levelname)s %(message)s")
    become_subreaper()  # what a task starts stays below the worker, see end_descendants
    batch_scheduling()  # before any thread starts: they inherit it (see procutil)
    worker = Worker(worker_id, os.environ["RAYNB_ADDRESS"], messages.key_from_env())
    return worker.serve()
