"""Run directories made ahead of time, in block groups where their files are cheap.

On ext4 without a journal (the 2-core VM raynb is measured on), a new inode is not
taken from those deleted in the last one to six minutes (``recently_deleted()`` in
``fs/ext4/ialloc.c``), and each new file's search starts at the first inode of its
directory's block group: in a group where a test suite or a benchmark just deleted
thousands of files, every new file costs CPU in the kernel, where this kernel
(``PREEMPT_NONE``) lets nothing else run on that CPU. A warm re-run makes its directory
and three to five files there: more than the rest of a re-run of a trivial function
(the figures are in ``benchmarks/LOG.md``, with the command that measures them). A
process of lower priority making them ahead of time did not help: its system calls took
the CPUs from the ranks all the same.

What does help is where the directory is. ext4's Orlov allocator spreads the
subdirectories of a directory flagged "top of a hierarchy" (``chattr +T``) over block
groups with many free inodes, which mostly saw no deletions: a file in such a
directory is cheap again. So the head keeps spare empty directories (0700) in a
private one of its own so flagged (``$RAYNB_HOME/spare/<pid>-<random>``), made by a process at the
lowest CPU priority (``spare_maker.py``), and a run's directory is one of them,
renamed into place (:func:`take`); its files, created in it, land in its group.
(Making a directory in the flagged one is dear, for Orlov's search: the maker pays it
once per batch.)

Elsewhere nothing changes: on another file system the flag is not set (a rename still
costs no more than a ``mkdir``), and for a run directory on another file system than
``$RAYNB_HOME`` (rename fails) or with no spare ready, the directory is made as before.
Same names, modes and contents. ``RAYNB_SPARE_FILES=0`` turns it off.
"""

from __future__ import annotations

import array
import errno
import fcntl
import logging
import os
import secrets
import shutil
import subprocess
import sys
from collections import deque
from pathlib import Path

from . import spare_maker

log = logging.getLogger("raynb.spare")

# Directories per batch (a directory of the maker's), and batches kept ready.
DIRS, AHEAD = 8, 4
# linux/fs.h: the inode flags ioctls, and "top of directory hierarchy" (chattr +T).
_FS_IOC_GETFLAGS, _FS_IOC_SETFLAGS, _FS_TOPDIR_FL = 0x80086601, 0x40086602, 0x00020000


def flag_top_directory(path) -> bool:
    """Set ext2/3/4's "top of a directory hierarchy" flag on ``path`` (what ``chattr +T``
    does); False where the file system has no such flag."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        flags = array.array("i", [0])
        fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags, True)
        flags[0] |= _FS_TOPDIR_FL
        fcntl.ioctl(fd, _FS_IOC_SETFLAGS, flags)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


class SparePool:
    """Spare empty directories, made by a ``spare_maker`` process in a directory of its
    own inside ``root`` (``<root>/<pid>-<random>``: a maker of a killed head, still
    cleaning up, removes only its own).

    Args:
        root (Path): a directory only this process (and the makers of earlier heads of its
            ``RAYNB_HOME``) uses: what earlier makers left in it is removed.
        dirs (int): how many directories one batch holds.
        ahead (int): batches kept ready.
    """

    def __init__(self, root: Path, dirs: int = DIRS, ahead: int = AHEAD):
        self.root = Path(root)
        self.dir = self.root / f"{os.getpid()}-{secrets.token_hex(4)}"
        self._size, self._ahead = dirs, ahead
        self._ready: deque = deque()  # [batch directory, numbers of the directories left in it]
        self._proc: subprocess.Popen | None = None
        self._from_maker = self._to_maker = -1
        self._partial = b""
        self.taken = self.missed = 0  # spares used, and directories made with none ready

    def start(self) -> "SparePool":
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        for old in self.root.iterdir():  # a killed head's leftovers
            shutil.rmtree(old, ignore_errors=True)
        self.dir.mkdir(mode=0o700)
        flag_top_directory(self.dir)
        ready_r, ready_w = os.pipe()  # (not inherited by what the head starts later)
        used_r, used_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    spare_maker.__file__,
                    str(self.dir),
                    str(ready_w),
                    str(used_r),
                    str(self._size),
                    str(self._ahead),
                ],
                pass_fds=(ready_w, used_r),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )  # a Ctrl-C meant for a foreground head is not its
        except OSError as e:
            log.warning("cannot start the spare-directory maker (run directories are made as needed): %s", e)
            os.close(ready_r)
            os.close(used_w)
            return self
        finally:
            os.close(ready_w)
            os.close(used_r)
        os.set_blocking(ready_r, False)
        os.set_blocking(used_w, False)
        self._from_maker, self._to_maker = ready_r, used_w
        return self

    def stop(self) -> None:
        """Stop the maker and remove its directory with what is left."""
        if self._to_maker >= 0:
            os.close(self._to_maker)  # its end of input: it cleans up and exits
            self._to_maker = -1
        if self._proc is not None:
            try:  # at SCHED_IDLE it may wait for a CPU on a busy machine; the head cleans up
                self._proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._from_maker >= 0:
            os.close(self._from_maker)
            self._from_maker = -1
        shutil.rmtree(self.dir, ignore_errors=True)
        try:
            self.root.rmdir()  # when nothing else is in it
        except OSError:
            pass

    def _read_ready(self) -> None:
        """Take in the batches the maker finished since the last look (no wait)."""
        try:
            data = os.read(self._from_maker, 4096)
        except OSError:  # none (EAGAIN)
            return
        if not data:  # the maker is gone: what is ready stays usable
            os.close(self._from_maker)
            self._from_maker = -1
            return
        self._partial += data
        *lines, self._partial = self._partial.split(b"\n")
        for line in lines:
            k, count = line.split()
            self._ready.append([self.dir / str(int(k)), list(range(int(count)))])

    def take(self, path) -> bool:
        """Rename a spare directory to ``path``, which must not exist. False when it
        exists, when there is no spare, or when ``path`` is on another file system:
        the caller then makes it itself."""
        if os.path.lexists(path):
            return False
        if self._from_maker >= 0:
            self._read_ready()
        if not self._ready:
            self.missed += 1
            return False
        batch = self._ready[0]
        try:
            os.rename(batch[0] / str(batch[1][-1]), path)
        except OSError as e:
            if e.errno == errno.EXDEV:
                return False  # another file system: the spare stays for a run that can use it
            self._drop_one()  # gone (removed by hand, the maker's cleanup): the next one, next time
            self.missed += 1
            return False
        self._drop_one()
        self.taken += 1
        return True

    def _drop_one(self) -> None:
        batch = self._ready[0]
        batch[1].pop()
        if not batch[1]:
            self._ready.popleft()
            self._used(batch[0])

    def _used(self, batch: Path) -> None:
        if self._to_maker < 0:
            return
        try:
            os.write(self._to_maker, f"{batch.name}\n".encode())
        except OSError:  # the maker is gone
            pass


_pool: SparePool | None = None


def install(root: Path) -> SparePool | None:
    """Start a pool in ``root`` for this process's run files (the head's), unless
    ``RAYNB_SPARE_FILES=0``."""
    global _pool
    if os.environ.get("RAYNB_SPARE_FILES", "1") == "0":
        return None
    _pool = SparePool(root).start()
    return _pool


def uninstall() -> None:
    global _pool
    pool, _pool = _pool, None
    if pool is not None:
        pool.stop()


def stats() -> dict | None:
    """``{"taken", "missed"}``: spares used, and creations that found none (None: no pool)."""
    pool = _pool
    return None if pool is None else {"taken": pool.taken, "missed": pool.missed}


def take(path) -> bool:
    """:meth:`SparePool.take` of the installed pool; False when none is installed."""
    pool = _pool
    return pool is not None and pool.take(path)
