"""A run file with the bytes of an earlier run's file, made as a hard link to it.

A warm re-run of an unchanged cell ships the same function with the same config: its
``function.pkl`` and ``params.json`` hold the bytes of the previous run's. Making an
inode can cost ext4 far more CPU than a hard link (it depends on the block group of the
directory; see ``spare_files``), so such a file is linked to the earlier one, as
``rsync --link-dest`` and ccache's hard-link mode do.

It is safe because raynb never writes into these files again (``RunDirectory`` replaces
a file by rename), and an earlier file is only linked while it is the one raynb wrote
(same inode, size, mtime, owner and mode 0600: one a user edited, replaced or chmod-ed
is written anew). Removing one run's directory leaves the others' files whole. What a
user writes *into* a linked file by hand shows in every run that shares it, so links
stay within one storage path and at most ``MAX_LINKS`` runs share a file.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from typing import Callable

# Bigger files are written as before: hashing them costs more than a new inode.
MAX_LINKED_BYTES = 256 << 10
# The most run directories one file is shared by.
MAX_LINKS = 32


class LinkedFiles:
    """The latest files written, by their bytes' SHA-256 (at most ``size`` of them)."""

    def __init__(self, size: int = 64):
        self.size = size
        self._written: OrderedDict[bytes, tuple] = OrderedDict()  # digest -> (path, ino, size, mtime_ns)
        self.linked = 0

    def write(self, path, data, write: Callable[[], None]) -> None:
        """Make ``path`` (which must not exist) hold ``data`` (bytes-like): a hard link to
        an earlier file with the same bytes, else ``write()``, which creates it."""
        if len(data) > MAX_LINKED_BYTES:
            return write()
        key = hashlib.sha256(data).digest()
        earlier = self._written.get(key)
        if earlier is not None and self._link(earlier, path):
            self.linked += 1
            self._written.move_to_end(key)
            return
        self._written.pop(key, None)
        write()
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return
        self._written[key] = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
        while len(self._written) > self.size:
            self._written.popitem(last=False)

    @staticmethod
    def _link(earlier: tuple, path) -> bool:
        """Link ``path`` to the earlier file if it is still the one written; False when
        it is not (or the link fails: another file system, ``path`` exists)."""
        src, ino, size, mtime = earlier
        path = str(path)
        # Same storage path: <storage>/<run>/<file> on both sides.
        if os.path.dirname(os.path.dirname(src)) != os.path.dirname(os.path.dirname(path)):
            return False
        try:
            st = os.stat(src, follow_symlinks=False)
            if (
                (st.st_ino, st.st_size, st.st_mtime_ns) != (ino, size, mtime)
                or st.st_uid != os.geteuid()
                or st.st_mode & 0o7777 != 0o600
                or st.st_nlink >= MAX_LINKS
            ):
                return False
            os.link(src, path, follow_symlinks=False)
        except OSError:
            return False
        try:
            if os.stat(path, follow_symlinks=False).st_ino == ino:
                return True
        except OSError:
            pass
        try:  # the source was swapped between the stat and the link: write it anew
            os.unlink(path)
        except OSError:
            pass
        return False
