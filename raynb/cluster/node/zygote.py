"""The zygote: a single-threaded fork server that imported torch once.

The node agent starts one zygote per machine and talks to it over the zygote's
stdin/stdout with one-line commands::

    node -> zygote   spawn <worker_id> [kind]     fork a worker (of a kind: kind_zygote.py)
    zygote -> node   ready                        torch is imported, forks are cheap
                     spawned <worker_id> <pid>
                     exited <pid> <exitcode> <signal>

The zygote is each worker's parent, so it learns of a worker's death from
``waitpid`` the moment it happens, with the exit code or signal.

Each worker leads a process group of its own, and what its tasks start stays in
it. Before the zygote reaps a dead worker it kills that group (the zombie still
holds the group's id, so it cannot name another group yet); as a child subreaper
it also gets, and kills, what the worker left that had moved to a group or session
of its own. A worker ends its tasks' processes itself at the end of each task
(``procutil.end_descendants``).

It must stay single-threaded and must never run a torch operation: forking a
process with threads (a ZeroMQ context, an OpenMP pool) leaves the child with
locks nobody will release. That is also why the node agent, which has a ZeroMQ
context and a sampling thread, is a separate process.
"""

from __future__ import annotations

import gc
import importlib
import os
import select
import signal
import sys
import tempfile

from ..procutil import become_subreaper, die_with_parent, end_descendants, kill_group, stdio_to_log
from . import kind_zygote

# Imported once in the zygote so every forked worker has them for free.
PRELOAD_MODULES = ("raynb.train", "raynb.train.torch")
# The same, when installed: otherwise every fresh worker pays xgboost's slow import.
# It brings in scipy's OpenBLAS (threads, as numpy's already are) and pyarrow's jemalloc
# background thread; both libraries take their locks across fork (pthread_atfork).
OPTIONAL_PRELOAD_MODULES = ("xgboost", "raynb.train.xgboost")
# Frameworks a user may have the zygote import too (``raynb start --preload``, RAYNB_PRELOAD):
# their first fit then starts warm, for a slower start and the node's memory.
PRELOADABLE = {
    "lightning": ("lightning.pytorch", "raynb.train.lightning"),
    "transformers": ("transformers", "transformers.trainer", "raynb.train.huggingface.transformers"),
}
# Names that ask for a kind's zygote (kind_zygote.py) to start with the node instead: TensorFlow
# is never imported into the zygote that forks torch's workers.
PRELOADABLE_KINDS = {
    "tensorflow": "tensorflow",
    "tf": "tensorflow",
    "keras": "tensorflow",
    "tf_keras": "tensorflow",
    "tf-keras": "tensorflow",
}


def _preload_names(names: str | None) -> list:
    return list(filter(None, (n.strip().lower() for n in (names or "").split(","))))


def preload_modules(names: str | None) -> tuple:
    """The modules the frameworks ``names`` (comma-separated, as ``RAYNB_PRELOAD``) stand for
    in the torch zygote (a kind's name, see ``preload_kinds``, stands for none).

    Raises:
        ValueError: a name is neither in ``PRELOADABLE`` nor in ``PRELOADABLE_KINDS``.
    """
    out: list = []
    for name in _preload_names(names):
        if name in PRELOADABLE_KINDS:
            continue
        if name not in PRELOADABLE:
            choices = sorted(PRELOADABLE) + ["tensorflow"]
            raise ValueError(f"cannot preload {name!r}: choose from {', '.join(choices)}")
        out += [m for m in PRELOADABLE[name] if m not in out]
    return tuple(out)


def preload_kinds(names: str | None) -> tuple:
    """The worker kinds whose zygotes ``names`` (as ``RAYNB_PRELOAD``) ask to start with the
    node (``("tensorflow",)`` for ``tensorflow``): their first run's ranks then fork from a
    zygote that already imported the framework."""
    kinds = [PRELOADABLE_KINDS[n] for n in _preload_names(names) if n in PRELOADABLE_KINDS]
    return tuple(dict.fromkeys(kinds))


def _preload_asked() -> None:
    """What RAYNB_PRELOAD asks for; a bad name or a missing package is logged, not fatal (a
    zygote that failed to start would be restarted, and fail again, until the node gives up)."""
    from .. import settings

    try:
        names = preload_modules(settings.get("RAYNB_PRELOAD"))
    except ValueError as e:
        print(f"RAYNB_PRELOAD ignored: {e}", file=sys.stderr)
        return
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as e:
            print(f"RAYNB_PRELOAD: {name} not imported ({e})", file=sys.stderr)


def _preload() -> None:
    """Import what every worker needs, once, before any fork."""
    import cloudpickle  # noqa: F401
    import numpy  # noqa: F401
    import psutil  # noqa: F401
    import torch  # noqa: F401

    # DistributedDataParallel(...) imports torch._dynamo on first use: a slow import in
    # every fresh worker (several at once on a small machine) unless done here.
    import torch._dynamo  # noqa: F401
    import torch.distributed  # noqa: F401
    import torch.nn  # noqa: F401
    import torch.nn.parallel  # noqa: F401
    import torch.utils.data  # noqa: F401
    import torch.utils.data.distributed  # noqa: F401
    import zmq  # noqa: F401  (the module only; contexts are made after fork)

    from ..worker import task_loop as worker  # noqa: F401

    # What the training functions import (raynb.train and its torch helpers), by name:
    # the cluster layer does not depend on them, it only warms the workers' cache.
    for name in PRELOAD_MODULES:
        importlib.import_module(name)
    for name in OPTIONAL_PRELOAD_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    _preload_asked()
    from ..worker.module_reload import warm

    warm()  # the ~2,000 modules above are classified once here, not in every worker
    # Out of the collector's reach: a worker's first collection would otherwise write to
    # every object's header above and copy each page of them into the worker (copy-on-write).
    gc.collect()
    gc.freeze()


def _private_tmpdir(worker_id: str) -> None:
    """The worker's TMPDIR, which its node agent removes when the worker exits (see
    node._workers_tmp_dir). tempfile's cached choice (made in the zygote) is replaced."""
    os.environ["RAYNB_WORKER_ID"] = worker_id  # names the rank's own transfers (ckpt_transfer)
    root = os.environ.get("RAYNB_WORKERS_TMP")
    if not root:
        return
    path = os.path.join(root, worker_id)
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.environ["TMPDIR"] = path
    tempfile.tempdir = path


def _run_child(worker_id: str, log_dir: str) -> None:
    """In the forked child: detach from the zygote's pipes and become a worker."""
    code = 1
    try:
        os.setpgid(0, 0)  # a group of its own: the processes its tasks start are ended with it
        _private_tmpdir(worker_id)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        die_with_parent(signal.SIGKILL)
        stdio_to_log(os.path.join(log_dir, f"worker-{worker_id}.log"))
        from ..worker.task_loop import main as worker_main

        code = worker_main(worker_id)
    except BaseException:  # noqa: BLE001 - report, then leave with an error code
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code or 0)


def _reap(children: set[int], out, subs: dict | None = None) -> None:
    """Report every worker that exited. Its process group is killed first, while its
    zombie still holds the group's id, and then its orphans (re-parented here). A worker
    of a kind's zygote that died is re-parented here too, and reported here (``subs``)."""
    subs = subs or {}
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None:
            return
        pid = info.si_pid
        theirs = next((s for s in subs.values() if pid in s.workers), None)
        mine = pid in children or theirs is not None
        if mine:
            kill_group(pid)
            _end_orphans(_kept(children, subs))
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            continue
        if mine:
            children.discard(pid)
            if theirs is not None:
                theirs.workers.discard(pid)
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -sig
            out.write(f"exited {pid} {code} {sig}\n")


def _kept(children: set[int], subs: dict) -> set[int]:
    """The zygote's children that are not orphans: its workers, its kinds' zygotes and
    their workers (re-parented here once their zygote died)."""
    kept = set(children)
    for sub in subs.values():
        kept.add(sub.pid)
        kept.update(sub.workers)
    return kept


def _end_orphans(workers: set[int]) -> None:
    """Kill the zygote's children that are not ``workers`` (see ``_kept``): what a dead
    worker's tasks left in a session of their own (``setsid``), re-parented here."""
    import psutil

    try:
        for p in psutil.Process().children():
            if p.pid not in workers:
                p.kill()
    except psutil.Error:
        pass


def _end_all(children: set[int]) -> None:
    """On the way out: every worker's group, then what is left below the zygote."""
    for pid in children:
        kill_group(pid)
    for pid in list(children):
        try:
            os.waitpid(pid, 0)  # dead, its orphans are the zygote's
        except ChildProcessError:
            pass
    children.clear()
    end_descendants(timeout=1.0)


def _spawn(worker_id: str, log_dir: str, children: set[int], out) -> None:
    pid = os.fork()
    if pid == 0:
        _run_child(worker_id, log_dir)
    try:
        os.setpgid(pid, pid)  # also here, so the group exists before "spawned" is read
    except OSError:
        pass  # the child did it first, or is gone already (then "exited" follows)
    children.add(pid)
    out.write(f"spawned {worker_id} {pid}\n")


def _wake_pipe() -> int:
    """SIGCHLD wakes the select loop through a pipe so deaths are seen at once; SIGTERM
    ends the loop. Returns the pipe's read end."""
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    return rfd


def main() -> int:
    die_with_parent(signal.SIGTERM)
    become_subreaper()
    log_dir = os.environ.get("RAYNB_LOG_DIR", ".")
    # This zygote's workers are torch's, whatever the node's environment says: a kind's
    # zygote sets the variable for its own (a stray one made every torch run wait for good).
    os.environ.pop(kind_zygote.KIND_ENV, None)
    _preload()
    wake = _wake_pipe()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    stdin = sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
    return _serve(stdin.fileno(), sys.stdout, log_dir, wake, subs=_kinds_asked(log_dir))


def _kinds_asked(log_dir: str) -> dict:
    """The kinds' zygotes RAYNB_PRELOAD asks for, started now (each imports its framework in
    its own process while this one serves); a bad setting is logged, not fatal."""
    from .. import settings

    try:
        kinds = preload_kinds(settings.get("RAYNB_PRELOAD"))
        preload_modules(settings.get("RAYNB_PRELOAD"))
    except ValueError:
        return {}  # _preload_asked logged it
    return {kind: kind_zygote.start(kind, log_dir, _serve_kind) for kind in kinds}


def _serve_kind(cmd_fd: int, out, log_dir: str) -> int:
    """The fork loop of a kind's zygote (``kind_zygote``): it forks its own kind only."""
    return _serve(cmd_fd, out, log_dir, _wake_pipe(), subs=None)


def _serve(cmd_fd: int, out, log_dir: str, wake: int, subs: dict | None) -> int:
    """Fork on ``spawn`` lines read from ``cmd_fd`` until EOF or ``exit``; report on ``out``.
    ``subs``: the kinds' zygotes by kind (the torch zygote's), None in a kind's zygote."""
    pending = b""
    children: set[int] = set()
    try:
        while True:
            fds = [cmd_fd, wake] + [s.lines for s in (subs or {}).values()]
            try:
                ready, _, _ = select.select(fds, [], [])
            except InterruptedError:
                continue
            if wake in ready:
                os.read(wake, 4096)
            for sub in [s for s in (subs or {}).values() if s.lines in ready]:
                if not kind_zygote.relay(sub, out, children):
                    del subs[sub.kind]  # died: the next spawn of its kind starts another
            _reap(children, out, subs)  # everything that has exited, whatever woke us
            out.flush()
            if cmd_fd in ready:
                chunk = os.read(cmd_fd, 65536)
                if not chunk:
                    break  # the node agent (or the torch zygote) is gone
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if not _command(line.decode().split(), log_dir, children, out, subs):
                        return 0
                out.flush()
    finally:
        _end_all(children)
    return 0


def _command(parts: list, log_dir: str, children: set[int], out, subs: dict | None) -> bool:
    """Carry out one line: ``spawn <worker_id> [kind]`` or ``exit`` (returns False)."""
    if parts and parts[0] == "exit":
        return False
    if len(parts) not in (2, 3) or parts[0] != "spawn":
        return True
    kind = parts[2] if len(parts) == 3 else kind_zygote.DEFAULT_KIND
    if subs is None or kind not in kind_zygote.KIND_MODULES:
        _spawn(parts[1], log_dir, children, out)
        return True
    if kind not in subs:
        subs[kind] = kind_zygote.start(kind, log_dir, _serve_kind)
    subs[kind].spawn(parts[1])
    return True


def _exit(code: int) -> None:
    """Leave without the interpreter's teardown: with torch loaded it took about a second
    of every `raynb stop`, and a fork server has nothing to clean up but its pipe."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)


if __name__ == "__main__":
    try:
        _exit(main())
    except SystemExit as e:  # SIGTERM
        _exit(e.code if isinstance(e.code, int) else 0)
