"""Zygotes of another kind: a child of the torch zygote that imported a framework which
must never enter the torch zygote (TensorFlow), and forks that kind's workers.

The torch zygote (``zygote.py``) forks one, lazily, on the first ``spawn <id> <kind>``
of that kind. The child imports the kind's modules once and then serves the same fork
loop as its parent, reading ``spawn <id>`` from a pipe and writing its ``spawned`` and
``exited`` lines to another, which the torch zygote relays to the node agent and reads
to keep the pids of that kind's workers: when the kind's zygote dies, its workers (killed
with it, as they die with their parent) are re-parented to the torch zygote, a subreaper,
which reaps them and reports their exit.

Every worker of a kind knows it from ``RAYNB_WORKER_KIND`` (set here, before any fork)
and says it in its ``worker_ready``, so the head places a run only on workers of its kind.
Importing TensorFlow and tf-keras starts no thread, so forking after it is as safe as
forking after torch.
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Callable

from ..procutil import become_subreaper, die_with_parent, stdio_to_log

KIND_ENV = "RAYNB_WORKER_KIND"
DEFAULT_KIND = "torch"
# What a kind's zygote imports, and the environment its workers inherit.
KIND_MODULES = {
    "tensorflow": (
        "tensorflow",
        "tf_keras",
        "raynb.train.tensorflow",
        "raynb.train.tensorflow.keras",
        # What a first Model.fit under the strategy imports lazily.
        "tensorflow.python.data.ops.rebatch_op",
        "tf_keras.src.engine.base_layer_v1",
    ),
}
KIND_ENV_VARS = {
    # tf.keras is tf-keras: Keras 3's Model.fit does not run under MultiWorkerMirroredStrategy.
    "tensorflow": {"TF_USE_LEGACY_KERAS": "1"},
}
KINDS = (DEFAULT_KIND, *KIND_MODULES)


def worker_kind() -> str:
    """The kind of this process's worker (``torch`` unless a kind's zygote forked it)."""
    return os.environ.get(KIND_ENV) or DEFAULT_KIND


@dataclass
class KindZygote:
    """The torch zygote's handle on a kind's zygote: ``cmd``, the pipe its ``spawn`` lines go
    to; ``lines``, the pipe its ``spawned``/``exited`` lines come from; ``workers``, the pids
    it reported spawned and not yet exited."""

    kind: str
    pid: int
    cmd: int
    lines: int
    workers: set = field(default_factory=set)
    buf: bytes = b""

    def spawn(self, worker_id: str) -> None:
        os.write(self.cmd, f"spawn {worker_id}\n".encode())

    def close(self) -> None:
        for fd in (self.cmd, self.lines):
            try:
                os.close(fd)
            except OSError:
                pass


def start(kind: str, log_dir: str, serve: Callable) -> KindZygote:
    """Fork the zygote of ``kind``; in the child, ``serve(cmd_fd, out, log_dir)`` runs the
    fork loop once the kind's modules are imported (the parent goes on at once)."""
    cmd_r, cmd_w = os.pipe()
    line_r, line_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(cmd_w)
            os.close(line_r)
            code = _child(kind, cmd_r, line_w, log_dir, serve)
        except BaseException:  # noqa: BLE001 - report, then leave with an error code
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code or 0)
    os.close(cmd_r)
    os.close(line_w)
    return KindZygote(kind, pid, cmd_w, line_r)


def _child(kind: str, cmd_fd: int, line_fd: int, log_dir: str, serve: Callable) -> int:
    die_with_parent(signal.SIGTERM)
    become_subreaper()  # what its workers' tasks leave is re-parented here, and ended
    # Off the agent's pipes: the agent sees its zygote's end as EOF.
    stdio_to_log(os.path.join(log_dir, f"zygote-{kind}.log"))
    os.environ[KIND_ENV] = kind
    os.environ.update(KIND_ENV_VARS.get(kind, {}))
    for name in KIND_MODULES.get(kind, ()):
        try:
            importlib.import_module(name)
        except ImportError as e:  # its runs fail on their own import, naming the extra
            print(f"zygote of kind {kind}: {name} not imported ({e})", file=sys.stderr)
    gc.collect()
    gc.freeze()  # as in the torch zygote: a worker's collection copies no page of these
    return serve(cmd_fd, os.fdopen(line_fd, "w", buffering=1), log_dir)


def relay(sub: KindZygote, out, children: set) -> bool:
    """Pass the kind's zygote's lines on to ``out``, noting its workers' pids. False when it
    is gone: its workers then count as the torch zygote's own ``children`` (re-parented)."""
    chunk = os.read(sub.lines, 65536)
    if not chunk:
        children.update(sub.workers)
        sub.close()
        return False
    sub.buf += chunk
    *lines, sub.buf = sub.buf.split(b"\n")
    for raw in lines:
        line = raw.decode()
        parts = line.split()
        if len(parts) == 3 and parts[0] == "spawned":
            sub.workers.add(int(parts[2]))
        elif len(parts) == 4 and parts[0] == "exited":
            sub.workers.discard(int(parts[1]))
        out.write(line + "\n")
    return True
