"""Small process helpers shared by the head, node agent, zygote and workers."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import time

# The modules the long-lived processes run as (``python -m ...``): also the marker by
# which a pid is known to still be that process (see connection.process_alive).
HEAD_MODULE = "raynb.cluster.head"
NODE_MODULE = "raynb.cluster.node.agent"
ZYGOTE_MODULE = "raynb.cluster.node.zygote"

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_libc = None


def _prctl(option: int, arg: int) -> None:
    global _libc
    if not sys.platform.startswith("linux"):
        return
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    _libc.prctl(option, arg, 0, 0, 0)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux).

    The chain head -> node agent -> zygote -> worker each set this, so killing
    the head (even with SIGKILL) leaves no orphan holding memory or a GPU.
    """
    _prctl(_PR_SET_PDEATHSIG, int(sig))


def become_subreaper() -> None:
    """Orphaned descendants of this process are re-parented to it, not to init (Linux).

    A worker's task may start processes that outlive their parent (a double fork, a
    shell's ``cmd &``, a child that calls ``setsid`` to leave the process group): they
    stay this process's descendants, so :func:`end_descendants` still finds them.
    """
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


WORKER_SCHED_ENV = "RAYNB_WORKER_SCHED"


def worker_sched_policy() -> str:
    """``$RAYNB_WORKER_SCHED``: "batch" (the default, see :func:`batch_scheduling`) or
    "other" (Linux's normal policy), in any case.

    Raises:
        ValueError: another value; the message names the variable and both choices.
    """
    raw = os.environ.get(WORKER_SCHED_ENV, "")
    value = raw.strip().lower() or "batch"
    if value not in ("batch", "other"):
        raise ValueError(
            f"{WORKER_SCHED_ENV}={raw!r} is not a scheduling policy for raynb's workers: "
            "use 'batch' (the default: a rank waking up does not preempt the head or the "
            "notebook) or 'other' (Linux's normal policy), or unset it"
        )
    return value


def batch_scheduling() -> bool:
    """Put this thread, and the threads and processes it starts from now on, under
    Linux's ``SCHED_BATCH`` policy (``sched(7)``), unless ``RAYNB_WORKER_SCHED=other``;
    True when it did.

    Same CPU share as a normal process (its nice value is kept); what changes is that
    a batch task waking up does not preempt the task running on the CPU, which the
    kernel docs name "well suited for batch jobs" (``sched-design-CFS.rst``). For a
    warm worker that is the cluster's interactive processes keeping their CPU: with 4
    ranks on 2 cores the head was preempted by the first rank it woke, between sending
    that rank's task and the next rank's, and the notebook's
    kernel stays responsive while ranks train. Batch tasks take turns among themselves
    when one blocks or at the scheduler's tick, not at every wake-up: the ranks of a DDP
    run sharing cores (the digits CNN, 4 ranks on 2 cores) train faster.
    Unprivileged; a no-op where the policy does not exist (not Linux). A bad
    ``RAYNB_WORKER_SCHED`` is refused by ``raynb start`` and ``raynb node``; a worker
    that meets one anyway keeps the default.
    """
    try:
        policy = worker_sched_policy()
    except ValueError:
        policy = "batch"
    if policy != "batch" or not hasattr(os, "SCHED_BATCH"):
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except OSError:
        return False
    return True


def has_children() -> bool:
    """Whether this process has any child, alive or not yet reaped (one syscall)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def reap_children() -> None:
    """Reap every child that has exited (never waits for a live one)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_descendants(timeout: float = 2.0) -> list[int]:
    """SIGKILL every descendant of this process and reap those that are (or became, see
    :func:`become_subreaper`) its children; returns the pids it killed.

    Safe against pid reuse (psutil checks a process's start time before it signals
    it). A process that left this process's tree through something else (a daemon
    such as ``systemd-run`` or ``docker`` started it) is not found: only a cgroup
    would hold those.
    """
    import psutil

    if not has_children():
        return []  # the usual case, without a scan of /proc
    try:
        procs = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    deadline = time.monotonic() + timeout
    left = procs
    while left and time.monotonic() < deadline:
        reap_children()
        left = [p for p in left if running(p)]
        if left:
            time.sleep(0.005)
    reap_children()
    return [p.pid for p in procs]


def running(proc) -> bool:
    """Whether ``proc`` (a ``psutil.Process``) still runs. A zombie has exited: it holds
    nothing but its pid until its parent reaps it."""
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def alive(pids) -> list[int]:
    """The pids of ``pids`` that still run (zombies and gone ones are left out)."""
    import psutil

    out = []
    for pid in pids:
        try:
            if running(psutil.Process(pid)):
                out.append(pid)
        except psutil.Error:
            pass
    return out


def end_groups(pgids, started_before: float) -> None:
    """SIGKILL the members of the process groups ``pgids`` that started before
    ``started_before`` (``time.time()``): what dead workers' tasks left, once a leader,
    gone, may no longer hold its group's id (a new process could lead a group of it)."""
    import psutil

    pgids = set(pgids)
    if not pgids:
        return
    for p in psutil.process_iter(["create_time"]):
        try:
            if p.info["create_time"] <= started_before and os.getpgid(p.pid) in pgids:
                p.kill()
        except (OSError, psutil.Error):
            pass


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process group ``pgid`` (a worker and what its tasks started),
    or to the process alone when it leads no group."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        try:
            os.kill(pgid, sig)
        except ProcessLookupError:
            pass
    except PermissionError:
        pass


def describe_exit(exitcode: int | None, signum: int | None) -> str:
    """'killed by signal SIGKILL' or 'exited with code 3'."""
    if signum:
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return f"killed by signal {name}"
    return f"exited with code {exitcode}"


def signal_name(signum: int | None) -> str | None:
    if not signum:
        return None
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def python_env(extra: dict | None = None) -> dict:
    """The environment for a raynb child process: ours, plus ``extra``."""
    env = dict(os.environ)
    env.update(extra or {})
    return env


_libc = None


def trim_heap() -> bool:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim(0)``, on
    every arena). After a large transfer, the pieces ZeroMQ received (hundreds of 256 KiB
    messages queued at once, allocated by its I/O thread) stay in that thread's malloc
    arena once freed: a worker kept 110-250 MiB of a 256 MiB payload until its next task.
    False where there is no glibc."""
    global _libc
    try:
        if _libc is None:
            import ctypes

            _libc = ctypes.CDLL("libc.so.6")
        return bool(_libc.malloc_trim(0))
    except (OSError, AttributeError):
        _libc = False
        return False


def stdio_to_log(path: str) -> None:
    """In a forked process: stdin from ``/dev/null``, stdout and stderr appended to ``path``
    (made 0600, never opened through a symlink), line-buffered, off the parent's pipes."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdin = open(os.devnull)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
