"""Checkpoints: a directory of files that a run can resume from (``ray.train.Checkpoint``).

A checkpoint is only a path. The training function writes its state into a
directory of its own and passes ``Checkpoint.from_directory(dir)`` to
``report(..., checkpoint=...)``; raynb copies the files into the run directory
as ``checkpoint_000NNN/`` (under a temporary name first, then renamed, so a
crash mid-copy never leaves a half checkpoint as the latest).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path


class Checkpoint:
    """A checkpoint directory.

    Build one with :meth:`from_directory`; ``Result.checkpoint`` and
    ``get_checkpoint()`` hand out checkpoints that live in a run directory.

    Attributes:
        path (str): the directory holding the checkpoint's files.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = str(Path(path).expanduser().absolute())

    @classmethod
    def from_directory(cls, path: str | os.PathLike) -> "Checkpoint":
        """A checkpoint of the files in ``path``.

        Args:
            path (str | os.PathLike): an existing, readable directory.

        Raises:
            FileNotFoundError: ``path`` does not exist.
            NotADirectoryError: ``path`` is a file, not a directory.
            PermissionError: ``path`` cannot be listed.
        """
        p = Path(path).expanduser()
        try:
            # Path.exists() lets EACCES through (a parent this process cannot enter):
            # it would surface as a bare "[Errno 13]" with no word of what to fix.
            os.stat(p)
        except PermissionError:
            raise PermissionError(f"Checkpoint.from_directory({str(path)!r}): a parent directory is "
                                  "not accessible to this process; fix its permissions") from None
        except OSError:
            pass
        if not p.exists():
            raise FileNotFoundError(
                f"Checkpoint.from_directory({str(path)!r}): no such directory; save the model "
                "state into a directory first (e.g. torch.save(state, os.path.join(d, 'model.pt')))")
        if not p.is_dir():
            raise NotADirectoryError(
                f"Checkpoint.from_directory({str(path)!r}): this is a file; pass the directory "
                "that holds it")
        if not os.access(p, os.R_OK | os.X_OK):
            raise PermissionError(f"Checkpoint.from_directory({str(path)!r}): the directory is "
                                  "not readable by this process; fix its permissions")
        return cls(p)

    @contextlib.contextmanager
    def as_directory(self):
        """Context manager giving a local directory (str) with the checkpoint's files.

        The directory is the checkpoint itself (raynb checkpoints live on a file
        system every worker reads): read from it, do not write to it.
        """
        if not os.path.isdir(self.path):
            raise FileNotFoundError(f"checkpoint directory {self.path} is gone (pruned by "
                                    "CheckpointConfig(num_to_keep=...), or deleted)")
        yield self.path

    def to_directory(self, path: str | os.PathLike | None = None) -> str:
        """Copy the checkpoint's files into ``path`` (a new temporary directory when None).

        Returns:
            str: the directory written.
        """
        target = Path(path).expanduser() if path is not None else Path(tempfile.mkdtemp(prefix="checkpoint_"))
        shutil.copytree(self.path, target, dirs_exist_ok=True)
        return str(target)

    def __fspath__(self) -> str:
        return self.path

    def __eq__(self, other) -> bool:
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"Checkpoint(path={self.path!r})"
