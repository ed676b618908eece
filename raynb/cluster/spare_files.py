"""Empty files and directories made ahead of time, for the files of a run directory.

On some file systems making an inode costs far more than anything else a run does
with its files: on the 2-core VM raynb is measured on (ext4, shared with other busy
processes), creating a file or a directory takes 30-900 µs of CPU (it varies with the
disk's other traffic), a rename 12 µs, a write to an open file 3 µs. A warm re-run
makes seven (its directory, ``params.json``, ``run.json`` twice, ``function.pkl``,
``result.json``, ``progress.csv``): up to 6 ms on the head's loop, most of a re-run of
a trivial function.

So the head keeps a few spare empty files (0600) and directories (0700) in a private
directory of its own (``$RAYNB_HOME/spare``), made by a thread once runs stopped taking
them for a while (``REFILL_AFTER_S``: not while the head starts runs), and a run's new
file or directory is one of them, renamed into place (:func:`take`). (The thread is not
niced: starved while holding the GIL, it stalled the head's loop for milliseconds.) A rename only works within one file
system: for a run directory elsewhere, or with no spare left (a burst of runs), the
file is created as before. Nothing else changes: the same names, modes and contents.
``RAYNB_SPARE_FILES=0`` turns it off.
"""
from __future__ import annotations

import itertools
import logging
import os
import shutil
import threading
import time
from collections import deque
from pathlib import Path

log = logging.getLogger("raynb.spare")

# How many spares of each kind are kept ready (a warm run takes 4-6 files and 1 directory).
FILES, DIRS = 24, 4
# Spares are made once no run has taken one for this long (s): between a user's re-runs,
# never in the middle of a burst of them (a burst uses them up, then creates files itself).
REFILL_AFTER_S = 0.05


class SparePool:
    """Spare empty files and directories in ``root`` (created 0700, emptied first).

    Args:
        root (Path): a directory only this process uses (it is removed and re-made).
        files, dirs (int): how many of each to keep ready.
    """

    def __init__(self, root: Path, files: int = FILES, dirs: int = DIRS):
        self.root = Path(root)
        self._want = {"f": files, "d": dirs}
        self._ready: dict[str, deque] = {"f": deque(), "d": deque()}
        self._names = itertools.count()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.taken = self.missed = 0  # spares used, and creations that found none
        self._last_take = 0.0

    def start(self) -> "SparePool":
        shutil.rmtree(self.root, ignore_errors=True)  # a killed head's leftovers
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self._thread = threading.Thread(target=self._fill, name="raynb-spare-files", daemon=True)
        self._thread.start()
        self._wake.set()
        return self

    def stop(self) -> None:
        """Stop making spares and remove the directory with those left."""
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        shutil.rmtree(self.root, ignore_errors=True)

    def _fill(self) -> None:
        while not self._stop:
            self._wake.wait()
            self._wake.clear()
            while not self._stop:
                quiet = time.monotonic() - self._last_take
                if quiet < REFILL_AFTER_S:  # runs are being started: stay out of their way
                    time.sleep(REFILL_AFTER_S - quiet)
                    continue
                if not self._make_one():
                    break

    def _make_one(self) -> bool:
        """Make one missing spare; False when none is missing (or the disk refuses)."""
        for kind, want in self._want.items():
            if len(self._ready[kind]) < want:
                path = str(self.root / f"{kind}{next(self._names)}")
                try:
                    if kind == "d":
                        os.mkdir(path, 0o700)
                        os.chmod(path, 0o700)
                    else:
                        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW
                                     | os.O_CLOEXEC, 0o600)
                        os.fchmod(fd, 0o600)
                        os.close(fd)
                except OSError as e:  # a full disk: make none until the next take
                    log.warning("cannot make spare files in %s: %s", self.root, e)
                    return False
                self._ready[kind].append(path)
                return True
        return False

    def take(self, path, kind: str) -> bool:
        """Rename a spare ``kind`` ("f": file, "d": directory) to ``path``, which must not
        exist. False when it exists, when there is no spare, or when ``path`` is on
        another file system: the caller then creates it itself."""
        if os.path.lexists(path):
            return False
        self._last_take = time.monotonic()
        try:
            spare = self._ready[kind].popleft()
        except IndexError:
            self.missed += 1
            self._wake.set()
            return False
        self._wake.set()
        try:
            os.rename(spare, path)
        except OSError:
            self._ready[kind].appendleft(spare)  # another file system (EXDEV), or a race
            return False
        self.taken += 1
        return True


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


def take(path, kind: str = "f") -> bool:
    """:meth:`SparePool.take` of the installed pool; False when none is installed."""
    pool = _pool
    return pool is not None and pool.take(path, kind)
