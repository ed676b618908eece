"""The process every job runs under, so that all the processes a job starts end with it.

A job's driver may start processes that leave its process group and session (a child
that calls ``setsid``, a daemon that double-forks): a signal to the job's group misses
them, and they outlive the job, its stop and ``raynb stop``. The supervisor makes itself
a child subreaper (``PR_SET_CHILD_SUBREAPER``, Linux): every orphan in the job's tree is
re-parented to it, not to init, so the job's processes are exactly its descendants,
whatever they did to their group or session. It starts the driver and then:

- when the driver exits, SIGKILLs every descendant left (the job is over) and exits with
  the driver's status (its exit code, or the same signal);
- on SIGTERM (``raynb jobs stop``, the head's stop, the head's death through
  ``PR_SET_PDEATHSIG``), SIGTERMs every descendant and SIGKILLs those still there after
  its grace, which the head keeps below its own SIGKILL of the job's group.

It is run as a script (``python -I job_supervisor.py GRACE -- argv...``) and imports only
the standard library and psutil, so a job starts without importing raynb twice.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

_PR_SET_CHILD_SUBREAPER = 36


def command(entrypoint: list[str], grace_s: float) -> list[str]:
    """The argv that runs ``entrypoint`` under a supervisor with ``grace_s`` seconds between
    the SIGTERM and the SIGKILL of a stop."""
    return [sys.executable, "-I", os.path.abspath(__file__), f"{grace_s:g}", "--", *entrypoint]


def _descendants() -> list:
    import psutil

    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _signal_all(sig: int) -> int:
    """Send ``sig`` to every descendant; how many there were."""
    import psutil

    procs = _descendants()
    for p in procs:
        try:
            p.send_signal(sig)  # psutil checks the pid still names the process it listed
        except psutil.Error:
            pass
    return len(procs)


# The driver's pid and, once reaped (by the main loop or a signal handler), its status;
# whether a stop came (one may come before the driver is started).
_driver: list[int] = []
_status: list[int] = []
_stopping: list[int] = []


def _reap() -> None:
    """Reap every child that exited, without waiting; the driver's status is kept."""
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in _driver:
            _status.append(st)


def _end_all() -> None:
    """SIGKILL the descendants until none is left (one may fork between a scan and its kill)."""
    import time

    while _signal_all(signal.SIGKILL):
        time.sleep(0.005)
        _reap()
    _reap()


def main(argv: list[str]) -> int:
    grace_s, entrypoint = float(argv[0]), argv[2:]
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    def on_stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _stopping.append(signum)
        _signal_all(signal.SIGTERM)
        signal.setitimer(signal.ITIMER_REAL, grace_s)  # then SIGALRM: SIGKILL what is left

    signal.signal(signal.SIGALRM, lambda *_: _end_all())
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_stop)
    try:
        # The driver gets the default of the signals Python ignores, as subprocess does,
        # and of those this process ignores once stopping.
        _driver.append(os.posix_spawnp(entrypoint[0], entrypoint, os.environ, setsigdef=(
            signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)))
    except OSError as e:
        sys.stdout.write(f"raynb: cannot start {entrypoint[0]!r}: {e}\n")
        return 127
    if _stopping:
        _signal_all(signal.SIGTERM)  # a stop came while the driver was being started
    while not _status:
        try:
            pid, st = os.waitpid(-1, 0)  # the driver, or an orphan re-parented here
        except ChildProcessError:
            break
        if pid in _driver:
            _status.append(st)
    signal.setitimer(signal.ITIMER_REAL, 0)
    _end_all()
    st = _status[0] if _status else 0
    if os.WIFSIGNALED(st):
        sys.stdout.flush()
        signal.signal(os.WTERMSIG(st), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(st))  # the head sees the driver's own signal
    return os.waitstatus_to_exitcode(st)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
