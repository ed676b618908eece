"""``read_webdataset``: WebDataset tar shards as rows (standard library ``tarfile``).

Members of a shard that share a key (the name before the first ``.`` of the base name)
form one sample, as the WebDataset format says; each suffix becomes a column (``jpg``,
``cls``, ``json``, ...), with ``__key__`` and ``__url__`` (the shard), as Ray's
``read_webdataset``. The default decoder turns text, class labels, JSON, ``.npy`` and
images into values; pickled members (``.pkl``, ``.pt``) are refused, never unpickled."""

from __future__ import annotations

import io
import json
import re
import tarfile

from .dataset import Dataset
from .sources import InMemorySource

_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_IMAGES = ("jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm")


def decode_default(sample: dict) -> dict:
    """A sample's values decoded by their suffix (others stay bytes).

    Raises:
        ValueError: a pickled member (``.pkl``, ``.pickle``, ``.pt``, ``.pth``): give a
            decoder of your own for data you trust.
    """
    import numpy as np

    out = dict(sample)
    for key, value in sample.items():
        ext = key.split(".")[-1]
        if key.startswith("__"):
            continue
        if ext in ("txt", "text"):
            out[key] = value.decode("utf-8")
        elif ext in ("cls", "cls2"):
            out[key] = int(value.decode("utf-8"))
        elif ext == "json":
            out[key] = json.loads(value)
        elif ext == "npy":
            out[key] = np.load(io.BytesIO(value), allow_pickle=False)
        elif ext in _IMAGES:
            from PIL import Image

            out[key] = np.asarray(Image.open(io.BytesIO(value)))
        elif ext in ("pkl", "pickle", "pt", "pth"):
            raise ValueError(
                f"read_webdataset: member {key!r} is pickled; raynb does not unpickle shard "
                "contents. Pass decoder=fn (your own, for data you trust) or decoder=None for bytes"
            )
    return out


def _selected(name: str, patterns) -> bool:
    if patterns is None:
        return True
    if callable(patterns):
        return bool(patterns(name))
    import fnmatch

    return any(fnmatch.fnmatch(name, p) for p in patterns)


def samples(data: bytes, url: str, suffixes=None, fileselect=None):
    """The samples of one shard's bytes, in order: dicts of suffix -> bytes.

    Raises:
        ValueError: a key's members not next to each other, a suffix twice in a sample, or
            a shard that is not a whole tar file (named).
    """
    try:
        yield from _samples(data, url, suffixes, fileselect)
    except tarfile.TarError as e:
        raise ValueError(
            f"read_webdataset: {url} is not a whole tar file ({e}); check the shard (tar -tf) "
            "or leave it out of paths"
        ) from e


def _samples(data: bytes, url: str, suffixes, fileselect):
    current, seen = None, set()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|*") as tar:
        for member in tar:
            if not member.isreg() or not _selected(member.name, fileselect):
                continue
            m = _KEY.match(member.name)
            if not m:
                continue
            key, suffix = m.groups()
            if current is None or key != current["__key__"]:
                if current is not None:
                    seen.add(current["__key__"])
                    yield current
                if key in seen:
                    raise ValueError(
                        f"read_webdataset: {url}: the members of sample {key!r} are not next to "
                        "each other; make the tar with its names sorted (tar --sort=name)"
                    )
                current = {"__key__": key, "__url__": url}
            if suffix in current:
                raise ValueError(f"read_webdataset: {url}: {member.name} appears twice in sample {key!r}")
            if _selected(suffix, suffixes):
                current[suffix] = tar.extractfile(member).read()
    if current is not None:
        yield current


def _decoded(sample: dict, decoder) -> dict:
    """``sample`` through ``decoder``; a member the default decoder cannot read is named."""
    if decoder is None or decoder is False:
        return sample
    try:
        return _decode(sample, decoder)
    except (ValueError, UnicodeError, OSError) as e:
        if str(e).startswith("read_webdataset"):
            raise
        raise ValueError(
            f"read_webdataset: {sample.get('__url__')}: sample {sample.get('__key__')!r} does not "
            f"decode ({type(e).__name__}: {e}); pass decoder=None for bytes, or a decoder of your own"
        ) from e


def _decode(sample: dict, decoder) -> dict:
    if decoder is True:
        return decode_default(sample)
    for fn in decoder if isinstance(decoder, (list, tuple)) else [decoder]:
        sample = decode_default(sample) if fn is True else fn(sample)
    return sample


def read_webdataset(
    paths, *, decoder=True, fileselect=None, suffixes=None, shuffle=None, include_paths: bool = False, **kw
) -> Dataset:
    """One row per sample of the WebDataset shards ``paths`` (``.tar`` files, directories,
    globs, ``pyarrow.fs`` URIs), read in this process when called (Ray's ``read_webdataset``).

    Args:
        decoder (bool | callable | list | None): True: the default decoder; a function
            of a sample dict (or a list of them) returning the decoded sample; None: bytes.
        fileselect, suffixes (list[str] | callable | None): glob patterns (or a test) of the
            member names / suffixes to keep.
        shuffle (FileShuffleConfig | "files" | None): the order of the shards.

    Raises:
        FileNotFoundError: a path that does not exist. ValueError: see :func:`samples`.
    """
    from .more_sources import _read_files
    from .transforms import from_rows

    rows = []
    for f, data in _read_files(paths, "read_webdataset", (".tar",), shuffle):
        for s in samples(data, f, suffixes, fileselect):
            rows.append({**_decoded(s, decoder), **({"path": f} if include_paths else {})})
    if not rows:
        raise ValueError(f"read_webdataset({paths!r}): no samples in the shards")
    return Dataset(InMemorySource(from_rows(rows, "read_webdataset")))


__all__ = ["decode_default", "read_webdataset", "samples"]
