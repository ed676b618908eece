"""A job's working directory, unpacked off the head's loop, checked while it streams.

``raynb submit`` sends its working directory as one ``.tar.gz``. It is read as a
stream (``tarfile`` mode ``"r|gz"``: never the whole member list first, never the
whole archive decompressed in memory) and each member is checked before it is
written: the count of members (``MAX_WORKING_DIR_FILES``) and the sum of their sizes
(``jobs.MAX_WORKING_DIR_BYTES``), so a gzip bomb or a million empty files is refused
after reading at most the limit's worth, with the reason, and what was written of it is
removed. ``tarfile``'s ``"data"`` filter refuses links out of the directory, devices
and absolute paths. The head runs :func:`unpack_in_child` on an ``offloop`` thread: the
unpacking itself (tens of thousands of small files are Python-heavy) runs in a child
process, this module run as a script, so it never competes with the loop for the GIL.
"""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

try:
    from .. import settings
except ImportError:  # run as a script (the unpacker child, -I -S): its limits come as arguments
    settings = None


# The most members (files, directories) a working directory may hold.
MAX_WORKING_DIR_FILES = settings.get("RAYNB_MAX_WORKING_DIR_FILES") if settings else 100_000


class ArchiveRefused(ValueError):
    """The working directory cannot be unpacked (the message says why and the limit)."""


def unpack(archive, dest: Path, max_bytes: int, max_files: int = MAX_WORKING_DIR_FILES) -> int:
    """Unpack the ``.tar.gz`` bytes ``archive`` into the existing directory ``dest``.

    Returns:
        The number of members written.

    Raises:
        ArchiveRefused: not a gzip'd tar, a member the ``data`` filter refuses, more than
            ``max_files`` members or ``max_bytes`` bytes unpacked. What was written is
            removed (``dest`` is left empty).
    """
    try:
        return _stream(archive, dest, max_bytes, max_files)
    except ArchiveRefused:
        _empty(dest)
        raise
    except (tarfile.TarError, OSError, EOFError, ValueError) as e:
        _empty(dest)
        raise ArchiveRefused(f"the working directory archive cannot be unpacked: {e}") from None


def _stream(archive, dest: Path, max_bytes: int, max_files: int) -> int:
    count = total = 0
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r|gz") as tar:
        for member in tar:
            count += 1
            if count > max_files:
                raise ArchiveRefused(f"the working directory holds more than {max_files} files and "
                                     f"directories, over the limit (RAYNB_MAX_WORKING_DIR_FILES); "
                                     "leave generated files out, or ship data another way")
            if member.isfile():
                total += member.size
            if total > max_bytes:
                raise ArchiveRefused(f"the working directory holds more than {max_bytes} bytes unpacked, "
                                     f"over the limit (RAYNB_MAX_WORKING_DIR_BYTES); "
                                     "leave data and checkpoints out of it")
            tar.extract(member, dest, filter="data")
    return count


def _empty(dest: Path) -> None:
    for entry in list(os.scandir(dest)) if dest.is_dir() else ():
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass


def unpack_in_child(archive, dest: Path, max_bytes: int, max_files: int = MAX_WORKING_DIR_FILES,
                    timeout: float = 600.0) -> int:
    """:func:`unpack` in a child process (``python -I -S`` this file: the standard library
    only); the calling thread waits for it without the GIL.

    Returns the number of members written. Raises: ArchiveRefused (as :func:`unpack`, or
    the child failed or ran past ``timeout`` seconds; ``dest`` is then left empty)."""
    try:
        done = subprocess.run([sys.executable, "-I", "-S", os.path.abspath(__file__), str(dest), str(max_bytes),
                               str(max_files)], input=bytes(archive), capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        _empty(dest)
        raise ArchiveRefused(f"the working directory archive cannot be unpacked: {e}") from None
    if done.returncode == 0:
        return int(done.stdout or 0)
    _empty(dest)
    why = done.stderr.decode(errors="replace").strip().splitlines()
    raise ArchiveRefused(why[-1] if done.returncode == 2 and why else
                         f"the working directory archive cannot be unpacked: the unpacker exited with "
                         f"code {done.returncode}: {' '.join(why[-3:])}")


if __name__ == "__main__":   # unpack_in_child's child: the archive on stdin
    os.nice(10)   # behind the head's loop (and the ranks) for the machine's cores
    try:
        print(unpack(sys.stdin.buffer.read(), Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
    except ArchiveRefused as refused:
        print(refused, file=sys.stderr)
        sys.exit(2)
