"""The zygote: a single-threaded fork server that imported torch once.

The node agent starts one zygote per machine and talks to it over the zygote's
stdin/stdout with one-line commands::

    node -> zygote   spawn <worker_id>            fork a worker
    zygote -> node   ready                        torch is imported, forks are cheap
                     spawned <worker_id> <pid>
                     exited <pid> <exitcode> <signal>

The zygote is each worker's parent, so it learns of a worker's death from
``waitpid`` the moment it happens, with the exit code or signal.

It must stay single-threaded and must never run a torch operation: forking a
process with threads (a ZeroMQ context, an OpenMP pool) leaves the child with
locks nobody will release. That is also why the node agent, which has a ZeroMQ
context and a sampling thread, is a separate process.
"""
from __future__ import annotations

import importlib
import os
import select
import signal
import sys

from .procutil import die_with_parent

# Imported once in the zygote so every forked worker has them for free.
PRELOAD_MODULES = ("raynb.train", "raynb.train.torch")


def _preload() -> None:
    """Import what every worker needs, once, before any fork."""
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401
    import torch.nn  # noqa: F401
    import torch.nn.parallel  # noqa: F401
    # DistributedDataParallel(...) imports torch._dynamo on first use: ~1 s of CPU
    # in every fresh worker (4 at once on a small machine: seconds) unless done here.
    import torch._dynamo  # noqa: F401
    import torch.utils.data  # noqa: F401
    import torch.utils.data.distributed  # noqa: F401
    import cloudpickle  # noqa: F401
    import zmq  # noqa: F401  (the module only; contexts are made after fork)

    from . import worker  # noqa: F401

    # What the training functions import (raynb.train and its torch helpers), by name:
    # the cluster layer does not depend on them, it only warms the workers' cache.
    for name in PRELOAD_MODULES:
        importlib.import_module(name)


def _run_child(worker_id: str, log_dir: str) -> None:
    """In the forked child: detach from the zygote's pipes and become a worker."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        die_with_parent(signal.SIGKILL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        log = os.open(os.path.join(log_dir, f"worker-{worker_id}.log"),
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        sys.stdin = open(os.devnull)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        from .worker import main as worker_main

        code = worker_main(worker_id)
    except BaseException:  # noqa: BLE001 - report, then leave with an error code
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code or 0)


def main() -> int:
    die_with_parent(signal.SIGTERM)
    log_dir = os.environ.get("RAYNB_LOG_DIR", ".")
    _preload()
    out = sys.stdout
    # SIGCHLD wakes the select loop through a pipe so deaths are seen at once.
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    out.write("ready\n")
    out.flush()
    stdin = sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
    pending = b""
    children: set[int] = set()
    try:
        while True:
            try:
                ready, _, _ = select.select([stdin, rfd], [], [])
            except InterruptedError:
                continue
            if rfd in ready:
                os.read(rfd, 4096)
            # Reap everything that has exited, whatever woke us.
            while children:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                children.discard(pid)
                sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
                code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -sig
                out.write(f"exited {pid} {code} {sig}\n")
            out.flush()
            if stdin in ready:
                chunk = os.read(stdin.fileno(), 65536)
                if not chunk:
                    break  # the node agent is gone
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    parts = line.decode().split()
                    if len(parts) == 2 and parts[0] == "spawn":
                        pid = os.fork()
                        if pid == 0:
                            _run_child(parts[1], log_dir)
                        children.add(pid)
                        out.write(f"spawned {parts[1]} {pid}\n")
                    elif parts and parts[0] == "exit":
                        return 0
                out.flush()
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
