"""Files private to the user, written whole: a run's files hold pickled functions and data.

Every file is created 0600 (whatever the umask), never through a symlink; a write that
fails raises a :class:`RunFileError` naming the file; a JSON record is replaced by
rename, so a crash leaves the old file or the new one, never a torn one.
"""

from __future__ import annotations

import errno
import json
import os
from contextlib import contextmanager
from pathlib import Path


def json_default(value):
    return repr(value)


def private_opener(path, flags: int) -> int:
    """``open(..., opener=private_opener)``: a file created (or rewritten) 0600, never
    through a symlink."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    if flags & os.O_CREAT:
        try:
            os.fchmod(fd, 0o600)  # one left by an older raynb with the umask's mode
        except OSError:
            pass
    return fd


class RunFileError(OSError):
    """Writing one of a run's files failed; the message names the file and the error."""

    def __init__(self, path, error: OSError):
        super().__init__(error.errno, error.strerror or str(error), str(path))
        self.path = path

    def __str__(self) -> str:
        code = errno.errorcode.get(self.errno, "") if self.errno else ""
        return f"could not write {self.path}: {self.strerror}" + (f" ({code})" if code else "")


@contextmanager
def writing(path):
    """Raise what goes wrong writing ``path`` as a :class:`RunFileError` naming it."""
    try:
        yield
    except RunFileError:
        raise
    except OSError as e:
        raise RunFileError(path, e) from None


def aside(path) -> str:
    """Where ``path`` (str or Path) is written before it is renamed in: ``.<name>.tmp`` beside it."""
    head, name = os.path.split(os.fspath(path))
    return os.path.join(head, f".{name}.tmp")


def write_json_atomic(path: Path | str, data) -> None:
    """``path`` holding ``data`` as JSON, written aside and renamed in (a crash leaves the
    old file or the new one, never a torn one). One line: the C encoder (an ``indent``
    takes Python's, 6x slower, on every run's end)."""
    tmp = aside(path)
    with writing(path):
        rewrite(tmp, (json.dumps(data, default=json_default) + "\n").encode())
        os.replace(tmp, path)


def rewrite(path, data: bytes) -> None:
    """``path`` (created 0600 if missing) holding just ``data``. Not opened with O_TRUNC:
    ext4 flushes a file truncated to zero when it is closed (``auto_da_alloc``); a longer
    old content is cut after the write instead."""
    fd = private_opener(path, os.O_WRONLY | os.O_CREAT)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if os.fstat(fd).st_size > len(data):
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
