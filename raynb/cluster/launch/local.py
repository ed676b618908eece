"""Starting, finding and stopping the local cluster (``raynb start|status|stop``).

The head runs as a daemon in its own session, so it outlives the shell or
kernel that started it; the connection file is how everyone else finds it.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager

import psutil

from ...errors import ClusterError
from ..connection_file import (
    connection_file_path,
    head_alive,
    open_private,
    private_dir,
    process_alive,
    raynb_home,
    read_connection_file,
    remove_connection_file,
)
from ..head.pool import idle_timeout_s as _idle_timeout_s
from ..netaddr import check_host, is_loopback
from ..node.host import check_worker_limit
from ..procutil import HEAD_MODULE, NODE_MODULE, running, worker_sched_policy
from ..protocol import messages
from ..protocol.control import Client


@contextmanager
def _start_lock(shared: bool = False):
    """Held (exclusive) by a start until its workers are ready, so two kernels starting
    at once get one cluster, and one that finds it starting (shared) waits for it.

    flock: released by the kernel if the starting process dies.
    """
    with os.fdopen(open_private(raynb_home() / "start.lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            if not shared:  # who is starting, for `raynb status` meanwhile (starting_pid)
                f.truncate(0)
                f.write(str(os.getpid()))
                f.flush()
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def starting_pid() -> int | None:
    """The pid of the process starting the local cluster now (it holds the start lock),
    or None when no start is under way. Never waits."""
    path = raynb_home() / "start.lock"
    if not path.exists():
        return None
    with os.fdopen(open_private(path, os.O_RDONLY, create=False)) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = f.read().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(f, fcntl.LOCK_UN)
    return None


def _log_tail(name: str, lines: int = 20) -> str:
    try:
        fd = open_private(private_dir("logs") / name, os.O_RDONLY, create=False)
        with os.fdopen(fd, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except (OSError, ClusterError):
        return "(no log)"


def running_cluster(wait: bool = True) -> dict | None:
    """The connection info of the live local cluster, or None.

    A cluster still starting (another process holds the start lock) is waited
    for until its workers are ready: a run submitted before its node registered
    would be refused as too big for it; ``wait=False`` (``raynb status``) answers with
    what is there instead. A connection file whose head is dead or does not answer
    is stale: it is removed, never followed.
    """
    if read_connection_file() is None:
        return None  # nothing to wait for: a start in progress is joined by start_cluster's lock
    if not wait:
        return _live_cluster() if starting_pid() is None else read_connection_file()
    with _start_lock(shared=True):
        return _live_cluster()


def _live_cluster() -> dict | None:
    """running_cluster() without waiting for a start (the caller holds the start lock)."""
    info = read_connection_file()
    if info is None:
        return None
    if head_alive(info) or (info.get("ray") and not info.get("pids")):  # a Ray head elsewhere: ask it
        c = Client(info["address"], info["key"].encode(), info)
        try:
            if c.ping(timeout=3.0):
                return info
        finally:
            c.close()
    remove_connection_file()
    return None


def wait_for_workers(info: dict, num_workers: int, timeout: float) -> dict:
    """Block until the cluster has ``num_workers`` workers; returns the status."""
    c = Client(info["address"], info["key"].encode(), info)
    deadline = time.monotonic() + timeout
    try:
        while True:
            st = c.status(timeout=max(1.0, deadline - time.monotonic()))
            if len(st["workers"]) >= num_workers:
                return st
            node_pid = info.get("pids", {}).get("node")
            if node_pid and not process_alive(node_pid, NODE_MODULE):
                raise ClusterError(
                    "the local node agent exited while starting:\n" + _log_tail("node-local.log")
                )
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"only {len(st['workers'])} of {num_workers} workers became ready "
                    f"in {timeout:.0f}s:\n" + _log_tail("node-local.log")
                )
            time.sleep(0.05)
    finally:
        c.close()


def start_cluster(
    num_workers: int = 4,
    max_workers: int | None = None,
    timeout: float = 120.0,
    host: str = "127.0.0.1",
    port: int = 0,
    idle_timeout_s: float | None = None,
    key_file: str | None = None,
    head_only: bool = False,
) -> tuple[dict, bool]:
    """Start the local cluster in the background, or find the running one.

    Args:
        num_workers (int): warm workers to keep on this machine (>= 1).
        max_workers (int | None): the most workers this machine may hold.
        timeout (float): seconds to wait for the workers to be ready.
        host, port: where the head listens (127.0.0.1 and a free port by default).
        key_file (str | None): ``head-keys.json`` of ``raynb keygen``: keys kept across
            restarts (else fresh ones each start).
        head_only (bool): no node agent on this machine (``num_workers`` is ignored): the
            workers are those of the nodes that join.
        idle_timeout_s (float | None): seconds a worker forked beyond ``num_workers`` (for
            a big or a concurrent run) may stay idle before it is retired; None:
            ``$RAYNB_WORKER_IDLE_TIMEOUT_S``, else 60.

    Returns:
        (connection info, started): ``started`` is False when a cluster was already running.

    Raises:
        ValueError: ``num_workers`` is not a positive integer or exceeds ``max_workers``
            (default: the larger of 16 and 4 x the cores), the idle timeout is
            not a number of seconds >= 0, or ``$RAYNB_WORKER_SCHED`` is not a policy.
        ClusterError: the head or its workers did not come up (with their log's tail).
    """
    num_workers = _checked_start(num_workers, max_workers, host, idle_timeout_s, head_only)
    with _start_lock():
        info = _live_cluster()
        if info is not None:
            return info, False
        token = uuid.uuid4().hex
        _launch_head(_head_command(token, num_workers, max_workers, host, port, idle_timeout_s, key_file))
        deadline = time.monotonic() + timeout
        info = _wait_for_head(token, deadline)
        # Still under the lock: a second start (or running_cluster) waits until it is usable.
        wait_for_workers(info, num_workers, max(1.0, deadline - time.monotonic()))
    return info, True


def _checked_start(
    num_workers: int, max_workers: int | None, host: str, idle_timeout_s: float | None, head_only: bool
) -> int:
    """start_cluster's arguments checked before anything starts; returns the node's warm
    worker count (0 for a head alone). Raises ValueError as start_cluster says."""
    if head_only:
        num_workers = 0
    elif not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1:
        raise ValueError(
            f"num_workers must be a positive integer, got {num_workers!r} (a head "
            "without workers of its own: head_only=True, `raynb start --head-only`)"
        )
    else:
        check_worker_limit(num_workers, max_workers)  # else it forks max_workers and waits out the timeout
    check_host(host)  # an address this machine does not have fails here, naming its interfaces
    _idle_timeout_s(idle_timeout_s)  # a bad value (or $RAYNB_WORKER_IDLE_TIMEOUT_S) fails here
    worker_sched_policy()  # so does a bad $RAYNB_WORKER_SCHED
    return num_workers


def _head_command(
    token: str,
    num_workers: int,
    max_workers: int | None,
    host: str,
    port: int,
    idle_timeout_s: float | None,
    key_file: str | None,
) -> list[str]:
    """The command line that starts the head as a daemon."""
    cmd = [
        sys.executable,
        "-m",
        HEAD_MODULE,
        "--daemon",
        "--token",
        token,
        "--workers",
        str(num_workers),
        "--host",
        host,
        "--port",
        str(port),
    ]
    if max_workers:
        cmd += ["--max-workers", str(max_workers)]
    if idle_timeout_s is not None:
        cmd += ["--idle-timeout", str(float(idle_timeout_s))]
    if key_file:
        cmd += ["--key-file", os.path.abspath(key_file)]
    return cmd


def _launch_head(cmd: list[str]) -> None:
    """Run the head's launcher with a fresh key, its output to logs/head.log (0600)."""
    log_dir = private_dir("logs")
    env = dict(os.environ, RAYNB_KEY=messages.new_key().decode(), RAYNB_HOME=str(raynb_home()))
    with os.fdopen(open_private(log_dir / "head.log"), "ab") as log:
        launcher = subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    launcher.wait(timeout=30)  # the launcher forks the daemon and exits at once


def _wait_for_head(token: str, deadline: float) -> dict:
    """The connection file the head started with ``token`` writes, once it is there.
    Raises ClusterError (with head.log's tail) past ``deadline`` (``time.monotonic()``)."""
    while True:
        info = read_connection_file()
        if info is not None and info.get("token") == token:
            return info
        if time.monotonic() > deadline:
            raise ClusterError("the raynb head did not start:\n" + _log_tail("head.log"))
        time.sleep(0.02)


def join_command(info: dict, key_file) -> str | None:
    """The command that joins another host to this cluster, or None for a head on loopback
    (no other host can reach it)."""
    from ..netaddr import host_of

    if is_loopback(host_of(info["address"])):
        return None
    return (
        f"raynb node --address {info['address']} --key-file {key_file} "
        "[--workers N] [--gpus N] [--node-ip IP]"
    )


KEEP_ENV = "RAYNB_KEEP_CLUSTER"


def interactive() -> bool:
    """True in IPython (a Jupyter kernel, terminal ipython) or an interactive interpreter,
    where the cluster serves later cells; False in a plain script."""
    ipython = sys.modules.get("IPython")
    if ipython is not None and getattr(ipython, "get_ipython", lambda: None)() is not None:
        return True
    return hasattr(sys, "ps1") or bool(sys.flags.interactive)


def ensure_local_cluster(num_workers: int = 4, timeout: float = 120.0, message: str | None = None) -> dict:
    """The running local cluster's info, starting one when none runs.

    ``message`` is the line printed when a cluster is started (by default: that one
    starts, with how many workers); what becomes of the cluster is added to it.

    A cluster started here from a notebook or IPython keeps running for later cells
    (and the next kernel). One started by a plain script is stopped when the script
    exits, as ``ray.init()``'s local cluster is, unless ``$RAYNB_KEEP_CLUSTER=1``: a
    script's cluster used to outlive it silently, holding about 1 GB. A cluster
    started before (``raynb start``) is never stopped here.
    """
    info = running_cluster()
    if info is not None:
        return info
    stop_at_exit = not interactive() and os.environ.get(KEEP_ENV, "") != "1"
    # A cold start takes a few seconds: say why the cell is quiet, and what becomes of it.
    if interactive():
        then = "it keeps running for later cells; `%ray_cluster stop` or `raynb stop` ends it"
    elif stop_at_exit:
        then = f"it stops when this script exits; {KEEP_ENV}=1 keeps it, or `raynb start` one that stays"
    else:
        then = f"it outlives this script ({KEEP_ENV}=1): `raynb stop` ends it"
    print(
        f"{message or f'raynb: starting a local cluster with {num_workers} warm workers'} ({then})",
        flush=True,
    )
    info, started = start_cluster(num_workers=num_workers, timeout=timeout)
    if started and stop_at_exit:
        atexit.register(_stop_at_exit, str(raynb_home()), info.get("token"), os.getpid())
    return info


def start_and_keep(num_workers: int = 4, *args, **kwargs) -> tuple[dict, bool]:
    """``raynb start`` and ``%ray_cluster start``: :func:`start_cluster`, and a cluster found
    running (perhaps a script's, which stops when the script exits) is kept up until
    ``raynb stop`` (``head/idle_stop.py``). One that stopped meanwhile is started afresh.

    Returns and raises as :func:`start_cluster`; a head too old to keep it is warned of
    on stderr."""
    for _ in range(2):  # the second time: it stopped by itself as we came, a fresh one
        info, started = start_cluster(num_workers, *args, **kwargs)
        if started:
            return info, started
        c = Client(info["address"], info["key"].encode(), info)
        try:
            kept = c.hello(keep=True)
        finally:
            c.close()
        if kept or head_alive(info):
            break
    if not kept:
        print(
            "raynb: could not keep the running cluster up: its head did not answer, or is older "
            "than this raynb; it may stop when the script that started it exits",
            file=sys.stderr,
        )
    return info, started


def _stop_at_exit(home: str, token: str | None, pid: int) -> None:
    """Stop the cluster this script started: only in the process that started it, only in
    its RAYNB_HOME, and only if that home's cluster is still the one it started."""
    if os.getpid() != pid:
        return  # a forked child that exits normally must not stop its parent's cluster
    os.environ["RAYNB_HOME"] = home
    current = read_connection_file()
    if current is not None and current.get("token") == token:
        from ..protocol.control import OWN_IDENTITIES

        # Another process may use it meanwhile (a second script, a notebook): the head
        # then stops by itself once their runs end (head/idle_stop.py).
        stop_cluster(when_idle=True, owners=[i.decode() for i in list(OWN_IDENTITIES)])


def cluster_pids(info: dict) -> list[int]:
    """The head's and node agent's pids and all their descendants (zygote, workers).

    A pid that no longer belongs to that raynb process (it exited, and the pid may
    have been reused by an unrelated process) is skipped with its descendants.
    """
    pids = []
    for role, pid in info.get("pids", {}).items():
        if not process_alive(pid, {"head": HEAD_MODULE, "node": NODE_MODULE}.get(role, "raynb")):
            continue
        try:
            p = psutil.Process(pid)
            pids.append(p.pid)
            pids.extend(c.pid for c in p.children(recursive=True))
        except psutil.Error:
            continue
    return list(dict.fromkeys(pids))  # the node agent is also among the head's descendants


def _wait_gone(procs: list, timeout: float) -> list:
    """Wait until each process has exited; returns those still running after ``timeout`` s.

    A zombie counts as gone: it holds nothing but its pid until its parent reaps it, and
    the head's parent is init, which may take its time (psutil.wait_procs waited ~1.5 s
    for that on every stop)."""
    deadline = time.monotonic() + timeout
    while True:
        procs = [p for p in procs if running(p)]
        if not procs or time.monotonic() >= deadline:
            return procs
        time.sleep(0.02)


def _head_stays_up(info: dict, when_idle: bool, owners) -> bool:
    """Ask the head to shut down; True when it stays up (kept by `raynb start`, or, with
    ``when_idle``, in use by another client), saying so on stderr. A head that does not
    answer is False: it is then stopped by its pids."""
    c = Client(info["address"], info["key"].encode(), info)
    try:
        # A stop when idle is not a kill: a head slow to answer (a busy machine) gets
        # longer, so another client's run is not killed with it by mistake.
        reply = c.request(
            messages.SHUTDOWN,
            {"when_idle": True, "owners": list(owners)} if when_idle else {},
            reply_types=(messages.STATUS_REPLY,),
            timeout=15.0 if when_idle else 3.0,
        )
        if reply.content.get("stopping") is False and reply.content.get("kept"):
            print(
                "raynb: the cluster this script started stays up: `raynb start` keeps it "
                "(`raynb stop` ends it)",
                file=sys.stderr,
                flush=True,
            )
            return True
        if reply.content.get("stopping") is False:
            print(
                f"raynb: the cluster this script started stays up while another client uses it "
                f"({reply.content.get('in_use')}); it stops by itself when they are done "
                "(`raynb stop` ends it now)",
                file=sys.stderr,
                flush=True,
            )
            return True
    except ClusterError:
        pass
    finally:
        c.close()
    return False


def stop_cluster(timeout: float = 10.0, when_idle: bool = False, owners=()) -> bool:
    """Stop the local cluster and every process it started.

    Args:
        timeout (float): seconds to wait for its processes to exit before they are killed.
        when_idle (bool): stop only once no client but ``owners`` uses it
            (``head/idle_stop.py``). While one does, the head is left to stop by itself
            when they are done, and this returns at once, saying so on stderr.
        owners: routing ids (str) of the caller's own connections, for ``when_idle``.

    Returns False when no cluster was running. A head that does not answer is
    killed (only if its pid still belongs to a raynb head).
    """
    info = read_connection_file()
    if info is None:
        return False
    if info.get("ray"):  # raynb on a Ray cluster: its actors, through Ray (ray_engine)
        from .ray_engine import stop_on_ray

        return stop_on_ray(info)
    procs = []
    for pid in cluster_pids(info):
        try:
            procs.append(psutil.Process(pid))
        except psutil.Error:
            pass
    if not procs and not head_alive(info):
        remove_connection_file()  # stale: nothing of that cluster runs any more
        return False
    if head_alive(info) and _head_stays_up(info, when_idle, owners):
        return True
    alive = _wait_gone(procs, timeout)
    for p in alive:  # did not stop by itself: make sure (psutil checks the pid was not reused)
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    _wait_gone(alive, 5.0)
    if read_connection_file() is not None and not head_alive(info):
        remove_connection_file()
    return True


__all__ = [
    "start_cluster",
    "stop_cluster",
    "join_command",
    "running_cluster",
    "ensure_local_cluster",
    "connection_file_path",
    "cluster_pids",
]
