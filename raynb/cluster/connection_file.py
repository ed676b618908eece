"""Where a cluster is: ``$RAYNB_HOME`` and the connection file.

The connection file (``$RAYNB_HOME/cluster.json``, mode 0600) holds the head's
address, the cluster's HMAC key and the pids of the head and the local node
agent. It is the only way a client learns the key, so it is never world-readable.

As ssh treats ``~/.ssh``, raynb refuses a ``RAYNB_HOME`` or a connection file that
another user owns or may write (one could have planted it: a client would then
unpickle that user's replies and send them its functions and data), and a
connection file others may read (it hands out the key). Nothing in ``RAYNB_HOME``
is reached through a symlink.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from pathlib import Path

import psutil

from ..errors import ClusterError
from .procutil import HEAD_MODULE

CONNECTION_FILE_NAME = "cluster.json"
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def _refuse(path, problem: str, fix: str) -> ClusterError:
    return ClusterError(f"raynb refuses to use {path}: {problem}. {fix}")


def check_private(path, st: os.stat_result, *, secret: bool = False) -> None:
    """Refuse what another user owns or may write (and, with ``secret``, may read).

    Raises:
        ClusterError: naming ``path``, what is wrong and the command that fixes it.
    """
    if st.st_uid not in (os.getuid(), 0):
        raise _refuse(
            path,
            f"it is owned by uid {st.st_uid}, not by you (uid {os.getuid()}), so "
            "another user may have planted it",
            f"Use a RAYNB_HOME of your own (or, if it is yours, `chown {os.getuid()} {path}`)",
        )
    mode = stat.S_IMODE(st.st_mode)
    want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
    if mode & (0o077 if secret else 0o022):
        what = "readable or writable by others (it holds the cluster key)" if secret else "writable by others"
        raise _refuse(path, f"it is {what}: mode {mode:04o}", f"Fix it with `chmod {want:o} {path}`")


def _check_home(home: Path) -> None:
    try:
        lst = os.lstat(home)
        st = os.stat(home)
    except FileNotFoundError:
        raise ClusterError(f"RAYNB_HOME {home} vanished while raynb was using it") from None
    if stat.S_ISLNK(lst.st_mode) and lst.st_uid not in (os.getuid(), 0):
        raise _refuse(
            home,
            f"it is a symbolic link owned by uid {lst.st_uid}",
            f"Point RAYNB_HOME at a directory of your own (`rm {home}`)",
        )
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(home, "it is not a directory", "Point RAYNB_HOME at a directory of your own")
    check_private(home, st)


def raynb_home_path() -> str:
    """Where :func:`raynb_home` is, neither created nor checked."""
    return os.environ.get("RAYNB_HOME") or str(Path.home() / ".raynb")


def raynb_home() -> Path:
    """``$RAYNB_HOME`` or ``~/.raynb``, created with mode 0700.

    Raises:
        ClusterError: it is not a directory of this user's that only they may write.
    """
    home = Path(raynb_home_path())
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    _check_home(home)
    return home


def private_dir(name: str) -> Path:
    """``$RAYNB_HOME/<name>`` (e.g. ``logs``), created 0700, checked as RAYNB_HOME is."""
    path = raynb_home() / name
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise _refuse(
            path,
            "it is not a directory (a symbolic link?); raynb never follows links in RAYNB_HOME",
            f"Remove it (`rm {path}`)",
        )
    check_private(path, st)
    return path


def open_private(path, flags: int = os.O_WRONLY | os.O_APPEND, create: bool = True) -> int:
    """An fd on ``path`` in RAYNB_HOME: created 0600 (``O_EXCL``), or, when it exists,
    opened without following a symlink and checked as :func:`check_private` does.

    Raises:
        ClusterError: ``path`` is a symlink, not a regular file, or not private.
        FileNotFoundError: it does not exist and ``create`` is False.
    """
    if create:
        try:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        except FileExistsError:
            pass
    try:
        fd = os.open(path, flags | _NOFOLLOW)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _refuse(
                path,
                "it is a symbolic link; raynb never follows links in RAYNB_HOME",
                f"Remove it (`rm {path}`)",
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, "it is not a regular file", f"Remove it (`rm {path}`)")
        check_private(path, st)
    except BaseException:
        os.close(fd)
        raise
    return fd


def connection_file_path() -> Path:
    return raynb_home() / CONNECTION_FILE_NAME


def connection_file_name() -> str:
    """Where :func:`connection_file_path` is, without creating or checking ``RAYNB_HOME``
    (a str): for a stat that only asks whether the file changed. What is read from it
    goes through :func:`read_connection_file` and its checks."""
    return os.path.join(raynb_home_path(), CONNECTION_FILE_NAME)


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
    """The parsed connection file, or None when there is none or it is not one.

    Raises:
        ClusterError: the file is a symlink, or another user owns it, or others may
            read or write it (the message names the path and the fix). Nothing of it
            was used.
    """
    path = Path(path or connection_file_path())
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _refuse(
                path,
                "it is a symbolic link; raynb never follows links to a connection file",
                f"Remove it (`rm {path}`) and start the cluster again",
            ) from None
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        check_private(path, st, secret=True)
        try:
            info = json.loads(f.read())
        except (OSError, ValueError):
            return None
    if not isinstance(info, dict) or "address" not in info or "key" not in info:
        return None
    return info


_PROC = os.path.isdir("/proc/self")


def process_alive(pid: int | None, marker: str) -> bool:
    """True when ``pid`` runs and its command line mentions ``marker``.

    The marker guards against pid reuse: a stale file's pid may now belong to an
    unrelated process, which must never be taken for the head (or killed). On Linux one
    read of ``/proc/<pid>/cmdline`` (a zombie's is empty): ``fit()`` asks at every run, and
    psutil's checks cost several times more.
    """
    if not pid:
        return False
    if _PROC:
        try:  # os.read, not open(): no file object for a read of a few hundred bytes
            fd = os.open(f"/proc/{int(pid)}/cmdline", os.O_RDONLY | os.O_CLOEXEC)
        except (OSError, ValueError):
            return False
        try:
            return marker.encode() in os.read(fd, 1 << 16)
        except OSError:
            return False
        finally:
            os.close(fd)
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
