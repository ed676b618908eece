"""``RunConfig(storage_path=...)`` given as a ``pyarrow.fs`` URI (as Ray Train accepts).

raynb's head and workers write run directories and checkpoints through the file system
of their machines (renames make a checkpoint appear whole), so a URI must name a file
system they mount: ``file:///shared/results`` (``pyarrow.fs.LocalFileSystem``) is that
path. An object store URI (``s3://``, ``gs://``, ``hdfs://``) is refused with the fix
(mount it, e.g. s3fs / gcsfuse, and pass the mount's path) before anything ships.
"""
from __future__ import annotations


def local_path_of(uri: str) -> str:
    """The local path a ``file://`` URI names.

    Raises:
        ValueError: a URI pyarrow cannot read, or one of a file system that is not local
            (its type named, with the fix).
    """
    import pyarrow.fs as pafs

    scheme = uri.split("://", 1)[0].lower()
    if scheme != "file":  # decided by the scheme: no bucket is contacted to refuse it
        raise ValueError(f"storage_path {uri!r} is a {scheme}:// file system: raynb's head and workers "
                         "write run directories and checkpoints through their own file system, so mount "
                         "it on every node (s3fs, gcsfuse, an NFS export) and pass the mount's path, or a "
                         "file:// URI of it")
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError) as e:  # pyarrow.lib.ArrowInvalid is a ValueError
        raise ValueError(f"storage_path {uri!r} is not a URI pyarrow.fs can open: {e}") from None
    assert isinstance(fs, pafs.LocalFileSystem), fs
    return path
