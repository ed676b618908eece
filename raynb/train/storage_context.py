"""``TrainContext.get_storage()``: the run's storage paths, as Ray Train's ``StorageContext``.

Ray's is a developer API giving a rank the file system and paths of ``RunConfig``'s storage.
raynb's run directory is ``<storage_path>/<name>`` on the head's file system (mounted on the
nodes that write it), so this gives those paths and a ``pyarrow`` local file system.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class StorageContext:
    """Where this run's files go.

    Attributes:
        storage_path (str): ``RunConfig(storage_path=...)``: the parent of run directories.
        experiment_dir_name (str): the run's directory name (``RunConfig(name=...)``).
        experiment_fs_path (str): the run directory, ``storage_path/experiment_dir_name``.
        storage_fs_path (str): ``storage_path`` as a path on ``storage_filesystem``.
    """

    storage_path: str
    experiment_dir_name: str
    experiment_fs_path: str
    storage_fs_path: str

    @property
    def storage_filesystem(self):
        """A ``pyarrow.fs.LocalFileSystem`` (the run directory is a local path on the rank)."""
        import pyarrow.fs

        return pyarrow.fs.LocalFileSystem()

    def build_checkpoint_path_from_name(self, checkpoint_name: str) -> str:
        """``experiment_fs_path/checkpoint_name``.

        Raises:
            ValueError: a name that leads out of the run directory (absolute, ``..``).
        """
        base = os.path.normpath(self.experiment_fs_path)
        path = os.path.normpath(os.path.join(base, str(checkpoint_name)))
        if path == base or os.path.commonpath([base, path]) != base or "\0" in path:
            raise ValueError(
                f"build_checkpoint_path_from_name({checkpoint_name!r}): a checkpoint's name is "
                f"a directory name inside the run directory {self.experiment_fs_path}"
            )
        return path


def storage_of(task: dict) -> StorageContext:
    """The :class:`StorageContext` of the task's run."""
    run_dir = os.path.normpath(task["path"])
    parent, name = os.path.split(run_dir)
    return StorageContext(parent, name, run_dir, parent)
