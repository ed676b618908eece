"""``RunConfig(storage_path=...)`` given as a ``pyarrow.fs`` URI (as Ray Train accepts).

``file:///shared/results`` (``pyarrow.fs.LocalFileSystem``) is that local path. Any other
URI pyarrow.fs opens (``s3://bucket/prefix``, ``gs://``, ``hdfs://``, ``abfs://``) is a
*storage URI*: the run directory stays on the head's disk under the default storage path
(staging), and the head uploads each committed checkpoint to
``<uri>/<run name>/checkpoint_NNNNNN/`` with ``pyarrow.fs.copy_files`` (``head.uploads``),
as Ray Train's ``StorageContext`` does. Options ride in the URI's query, as
``pyarrow.fs.FileSystem.from_uri`` reads them (``?endpoint_override=host:port&scheme=http``
for an S3-compatible server); credentials come from the environment (``AWS_*``).
"""
from __future__ import annotations

import os
from urllib.parse import parse_qsl, urlencode

# Schemes pyarrow.fs opens without contacting anything to parse the URI (s3:// without a
# region may ask AWS for the bucket's region: that is left to the head's upload thread).
OBJECT_STORE_SCHEMES = {"s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss"}
_SECRET_KEYS = {"access_key", "secret_key", "session_token"}


def scheme_of(path: str) -> str | None:
    """The URI scheme of ``path`` (lower case), or None for a plain path."""
    return path.split("://", 1)[0].lower() if "://" in path else None


def is_storage_uri(path) -> bool:
    """Whether ``path`` (str | os.PathLike | None) is a URI of a file system other than the
    local one."""
    s = scheme_of(os.fspath(path) if path else "")
    return s is not None and s != "file"


def check_storage_uri(uri: str) -> str:
    """``uri`` if it is a storage URI raynb can write checkpoints to.

    Raises:
        ValueError: pyarrow.fs does not know its scheme (the message names it and the
            schemes it knows). Nothing is contacted for ``OBJECT_STORE_SCHEMES``.
    """
    if scheme_of(uri) in OBJECT_STORE_SCHEMES:
        return uri
    import pyarrow.fs as pafs

    try:
        pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError) as e:  # pyarrow.lib.ArrowInvalid is a ValueError
        raise ValueError(f"storage_path {redact(uri)!r} is not a URI pyarrow.fs can open ({e}); give a "
                         f"local path or a {', '.join(s + '://' for s in sorted(OBJECT_STORE_SCHEMES))} "
                         "URI") from None
    return uri


def split_storage_path(storage_path: str) -> tuple[str | None, str | None]:
    """``(local path, None)`` for a path or ``file://`` URI, ``(None, storage URI)`` for an
    object store's URI (its run directory then stages on the head's default storage path).

    Raises:
        ValueError: a URI pyarrow.fs cannot open (the message names it)."""
    if is_storage_uri(storage_path):
        return None, check_storage_uri(storage_path)
    return (local_path_of(storage_path) if "://" in storage_path else storage_path), None


def local_storage_path(storage_path: str, what: str) -> str:
    """``storage_path`` as a local path (a ``file://`` URI's path), for ``what`` (e.g.
    ``"Tuner"``), which writes its directory itself and cannot use an object store.

    Raises:
        ValueError: an object store's URI, or one pyarrow.fs cannot open."""
    local, uri = split_storage_path(storage_path)
    if uri is not None:
        raise ValueError(f"{what}(run_config=RunConfig(storage_path={redact(uri)!r})): {what} writes its "
                         "directory from the notebook and does not upload to an object store (a "
                         "TorchTrainer run's checkpoints are); give a local path, or a file system "
                         "every node mounts")
    return local


def local_path_of(uri: str) -> str:
    """The local path a ``file://`` URI names.

    Raises:
        ValueError: a URI pyarrow cannot read, or one of a file system that is not local
            (a storage URI: see :func:`is_storage_uri`).
    """
    import pyarrow.fs as pafs

    scheme = scheme_of(uri)
    if scheme != "file":  # decided by the scheme: no bucket is contacted to refuse it
        raise ValueError(f"{redact(uri)!r} is a {scheme}:// file system, not a local path")
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError) as e:
        raise ValueError(f"storage_path {uri!r} is not a URI pyarrow.fs can open: {e}") from None
    assert isinstance(fs, pafs.LocalFileSystem), fs
    return path


def join_uri(uri: str, *parts: str) -> str:
    """``uri`` with path ``parts`` appended before its query:
    ``join_uri("s3://b/p?scheme=http", "run", "checkpoint_000001")`` is
    ``"s3://b/p/run/checkpoint_000001?scheme=http"``."""
    base, sep, query = uri.partition("?")
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)]) + sep + query


def redact(uri: str) -> str:
    """``uri`` with credentials in its query (access_key, secret_key, session_token) hidden,
    for messages and logs."""
    base, sep, query = uri.partition("?")
    if not sep:
        return uri
    pairs = [(k, "***" if k in _SECRET_KEYS else v) for k, v in parse_qsl(query, keep_blank_values=True)]
    return base + "?" + urlencode(pairs, safe=":/*")


def open_uri(uri: str):
    """``(pyarrow.fs.FileSystem, path)`` of ``uri`` (``FileSystem.from_uri``); for an object
    store, its bucket is checked to exist.

    Raises:
        OSError: the file system cannot be opened or reached, or the bucket does not exist
            (the message names the URI, redacted, and the error).
    """
    import pyarrow.fs as pafs

    try:
        fs, path = pafs.FileSystem.from_uri(uri)
        if scheme_of(uri) in {"s3", "gs", "gcs"}:
            bucket = path.split("/", 1)[0]
            if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                raise OSError(f"bucket {bucket!r} does not exist (create it first)")
    except (ValueError, OSError) as e:
        raise OSError(f"storage_path {redact(uri)}: {e}") from None
    return fs, path
