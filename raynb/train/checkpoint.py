"""Checkpoints: a directory of files that a run can resume from (``ray.train.Checkpoint``).

A checkpoint is only a path. The training function writes its state into a
directory of its own and passes ``Checkpoint.from_directory(dir)`` to
``report(..., checkpoint=...)``; raynb copies the files into the run directory
as ``checkpoint_000NNN/`` (under a temporary name first, then renamed, so a
crash mid-copy never leaves a half checkpoint as the latest). A run whose
``storage_path`` is an object-store URI (``s3://...``) hands out checkpoints whose
``path`` is a URI there and ``filesystem`` the ``pyarrow.fs`` file system of it, as Ray's
``Checkpoint(path, filesystem)``; reading one downloads its files. A checkpoint of a
``Result`` from a raynb head whose ``path`` is not readable here (a notebook on a
laptop, the run's storage on the head's disk) is downloaded through the head
(``raynb.client.checkpoint_fetch``).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from ..cluster.storage.storage_uri import is_storage_uri, redact


class Checkpoint:
    """A checkpoint directory.

    Build one with :meth:`from_directory`; ``Result.checkpoint`` and
    ``get_checkpoint()`` hand out checkpoints that live in a run directory.

    Attributes:
        path (str): the directory holding the checkpoint's files: a local path, or a
            ``pyarrow.fs`` URI (``s3://bucket/prefix/run/checkpoint_000001?...``).
        filesystem (pyarrow.fs.FileSystem): the file system of ``path`` (opened from the
            URI on first use: ``pyarrow.fs.FileSystem.from_uri``; credentials from the
            environment, e.g. ``AWS_ACCESS_KEY_ID``).
    """

    def __init__(self, path: str | os.PathLike, filesystem=None):
        path = os.fspath(path)
        self.path = path if is_storage_uri(path) else str(Path(path).expanduser().absolute())
        self._fs = filesystem
        self._run_id: str | None = None  # set on checkpoints of a head's run (result_from_record)

    @classmethod
    def _of_run(cls, path: str, run_id: str | None) -> "Checkpoint":
        """A checkpoint of run ``run_id`` on a raynb head: read through the head where
        ``path`` is not readable here."""
        ckpt = cls(path)
        ckpt._run_id = run_id
        return ckpt

    def _on_head_only(self) -> bool:
        """True for a head's checkpoint whose run directory this process cannot read (where
        it can, a missing checkpoint was pruned: FileNotFoundError as on the head)."""
        return (bool(getattr(self, "_run_id", None)) and not is_storage_uri(self.path)
                and not os.access(os.path.dirname(self.path), os.R_OK | os.X_OK))

    @property
    def filesystem(self):
        import pyarrow.fs as pafs

        if self._fs is None:
            self._fs = pafs.FileSystem.from_uri(self.path)[0] if is_storage_uri(self.path) else pafs.LocalFileSystem()
        return self._fs

    def _remote(self) -> tuple:
        """(file system, path in it) of a checkpoint at a URI.

        Raises:
            FileNotFoundError: nothing is stored there."""
        import pyarrow.fs as pafs

        fs = self.filesystem
        inner = pafs.FileSystem.from_uri(self.path)[1]
        if fs.get_file_info(inner).type != pafs.FileType.Directory:
            raise FileNotFoundError(f"checkpoint {redact(self.path)} is not in its storage (pruned by "
                                    "CheckpointConfig(num_to_keep=...), or deleted)")
        return fs, inner

    def __getstate__(self) -> dict:
        # the file system is reopened from the URI where it is read
        return {"path": self.path, "_fs": None, "_run_id": getattr(self, "_run_id", None)}

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
        system every worker reads): read from it, do not write to it. A checkpoint at a
        URI, or one on a raynb head's disk that this process cannot read (a notebook on
        another machine), is downloaded into a temporary directory, removed when the
        block ends.

        Raises:
            FileNotFoundError: the checkpoint is gone.
            OSError: its storage cannot be reached (the message names the URI), or the
                head refused or could not send it.
        """
        if is_storage_uri(self.path) or self._on_head_only():
            tmp = tempfile.mkdtemp(prefix="checkpoint_")
            try:
                yield self.to_directory(tmp)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            return
        if not os.path.isdir(self.path):
            raise FileNotFoundError(f"checkpoint directory {self.path} is gone (pruned by "
                                    "CheckpointConfig(num_to_keep=...), or deleted)")
        yield self.path

    def to_directory(self, path: str | os.PathLike | None = None) -> str:
        """Copy the checkpoint's files into ``path`` (a new temporary directory when None).

        Returns:
            str: the directory written.

        A checkpoint on a raynb head's disk that this process cannot read is downloaded
        through the head (``raynb.client.checkpoint_fetch``; each file's SHA-256 checked).

        Raises:
            FileNotFoundError: the checkpoint is gone, or it is on a head's disk and this
                process is not connected to that head.
            OSError: a checkpoint at a URI, or on a head, could not be downloaded (the
                message names it).
        """
        target = Path(path).expanduser() if path is not None else Path(tempfile.mkdtemp(prefix="checkpoint_"))
        if self._on_head_only():
            from ..client.checkpoint_fetch import download

            return download(self._run_id, self.path, str(target))
        if is_storage_uri(self.path):
            import pyarrow.fs as pafs

            fs, inner = self._remote()
            target.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                pafs.copy_files(inner, str(target.absolute()), source_filesystem=fs,
                                destination_filesystem=pafs.LocalFileSystem())
            except (OSError, ValueError) as e:
                raise OSError(f"could not download checkpoint {redact(self.path)}: {e}") from None
            return str(target)
        shutil.copytree(self.path, target, dirs_exist_ok=True)
        return str(target)

    def __fspath__(self) -> str:
        return self.path

    def __eq__(self, other) -> bool:
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"Checkpoint(path={redact(self.path)!r})"
