"""Where a cluster is: ``$RAYNB_HOME`` and the connection file.

The connection file (``$RAYNB_HOME/cluster.json``, mode 0600) holds the head's
address, the cluster's HMAC key and the pids of the head and the local node
agent. It is the only way a client learns the key, so it is never world-readable.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import psutil

from .procutil import HEAD_MODULE

CONNECTION_FILE_NAME = "cluster.json"


def raynb_home() -> Path:
    """``$RAYNB_HOME`` or ``~/.raynb``, created with mode 0700."""
    home = Path(os.environ.get("RAYNB_HOME") or Path.home() / ".raynb")
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    return home


def connection_file_path() -> Path:
    return raynb_home() / CONNECTION_FILE_NAME


def write_connection_file(info: dict, path: Path | None = None) -> Path:
    """Atomically write ``info`` as JSON with mode 0600 (written to a temp name, then renamed)."""
    path = Path(path or connection_file_path())
    fd, tmp = tempfile.mkstemp(prefix=".cluster-", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(info, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def read_connection_file(path: Path | None = None) -> dict | None:
    """The parsed connection file, or None when there is none or it is unreadable."""
    path = Path(path or connection_file_path())
    try:
        with open(path) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or "address" not in info or "key" not in info:
        return None
    return info


def process_alive(pid: int | None, marker: str) -> bool:
    """True when ``pid`` runs and its command line mentions ``marker``.

    The marker guards against pid reuse: a stale file's pid may now belong to an
    unrelated process, which must never be taken for the head (or killed).
    """
    if not pid:
        return False
    try:
        p = psutil.Process(int(pid))
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return any(marker in part for part in p.cmdline())
    except (psutil.Error, ValueError):
        return False


def head_alive(info: dict) -> bool:
    return process_alive(info.get("pids", {}).get("head"), HEAD_MODULE)


def remove_connection_file(path: Path | None = None) -> None:
    try:
        os.unlink(path or connection_file_path())
    except FileNotFoundError:
        pass
