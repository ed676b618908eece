"""Small process helpers shared by the head, node agent, zygote and workers."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

# The modules the long-lived processes run as (``python -m ...``): also the marker by
# which a pid is known to still be that process (see connection.process_alive).
HEAD_MODULE = "raynb.cluster.head"
NODE_MODULE = "raynb.cluster.node"
ZYGOTE_MODULE = "raynb.cluster.zygote"

_PR_SET_PDEATHSIG = 1
_libc = None


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux).

    The chain head -> node agent -> zygote -> worker each set this, so killing
    the head (even with SIGKILL) leaves no orphan holding memory or a GPU.
    """
    global _libc
    if not sys.platform.startswith("linux"):
        return
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    _libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


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
