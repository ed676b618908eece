"""More of Ray Data's constructors, all in memory: ``range_tensor``, ``from_arrow``,
``read_text`` (one row per line, column ``"text"``) and ``read_numpy`` (one row per
first-axis entry of each ``.npy`` file, column ``"data"``), read in this process when
called (small files; stream large data with ``read_parquet`` / ``read_csv``)."""

from __future__ import annotations

import io

from . import block
from .dataset import Dataset
from .sources import InMemorySource


def range_tensor(
    n: int, *, shape: tuple = (1,), override_num_blocks: int | None = None, parallelism: int = -1
) -> Dataset:
    """Rows 0..n-1 as tensors of ``shape`` filled with the row's index (column ``"data"``,
    int64), as Ray's ``range_tensor``.

    Raises:
        ValueError: ``n`` below 0.
    """
    import numpy as np

    if n < 0:
        raise ValueError(f"range_tensor({n!r}): n must be >= 0")
    data = np.broadcast_to(np.arange(n, dtype=np.int64).reshape((n,) + (1,) * len(shape)), (n, *shape))
    return Dataset(InMemorySource(block.columns_from({"data": np.array(data)}, "range_tensor")))


def from_arrow(tables, *, override_num_blocks: int | None = None) -> Dataset:
    """A dataset of a ``pyarrow.Table`` (or a list of them, joined).

    Raises:
        TypeError: not a table or a list of tables.
    """
    import pyarrow as pa

    if isinstance(tables, (list, tuple)):
        tables = pa.concat_tables(list(tables))
    if not isinstance(tables, pa.Table):
        raise TypeError(f"from_arrow() takes a pyarrow.Table or a list of them, got {type(tables).__name__}")
    return Dataset(InMemorySource(block.columns_from(block.table_to_numpy(tables), "from_arrow")))


def _read_files(paths, what: str, suffixes: tuple = (), shuffle=None):
    """(path, bytes) of each file ``paths`` names (directories, globs, URIs), in the
    order a ``FileShuffleConfig`` ``shuffle`` draws (as listed when None)."""
    from .read_api import _resolve

    files, fs = _resolve(paths, what, shuffle)
    files = [f for f in files if not suffixes or f.endswith(suffixes)] or files
    for f in files:
        with fs.open_input_stream(f) as stream:
            yield f, stream.read()


def read_text(
    paths, *, encoding: str = "utf-8", drop_empty_lines: bool = True, include_paths: bool = False, **kw
) -> Dataset:
    """One row per line of the text files ``paths`` (column ``"text"``; ``"path"`` too with
    ``include_paths``), empty lines dropped by default, as Ray's ``read_text``."""
    text, where = [], []
    for f, data in _read_files(paths, "read_text", (), kw.get("shuffle")):
        for line in data.decode(encoding).splitlines():
            if line or not drop_empty_lines:
                text.append(line)
                where.append(f)
    cols = {"text": text, **({"path": where} if include_paths else {})}
    if not text:
        cols = {k: block.object_column([]) for k in cols}
    return Dataset(InMemorySource(block.columns_from(cols, "read_text")))


def read_numpy(paths, *, include_paths: bool = False, **kw) -> Dataset:
    """The ``.npy`` files ``paths``, joined along their first axis (column ``"data"``), as
    Ray's ``read_numpy``."""
    import numpy as np

    arrays, where = [], []
    for f, data in _read_files(paths, "read_numpy", (".npy",), kw.get("shuffle")):
        a = np.load(io.BytesIO(data), allow_pickle=False)
        arrays.append(a)
        where += [f] * len(a)
    cols = {"data": np.concatenate(arrays) if arrays else np.empty(0)}
    if include_paths:
        cols["path"] = where
    return Dataset(InMemorySource(block.columns_from(cols, "read_numpy")))


_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif", ".webp")


def read_images(
    paths, *, size: tuple | None = None, mode: str | None = None, include_paths: bool = False, **kw
) -> Dataset:
    """The image files ``paths`` (directories, globs) as rows of column ``"image"`` (a
    uint8 array H x W x C, or H x W for one channel; ``"path"`` too with
    ``include_paths``), decoded with Pillow, resized to ``size`` (height, width) and
    converted to ``mode`` ("RGB", "L", ...) when given, as Ray's ``read_images``.

    Raises:
        ImportError: Pillow is not installed (pip install pillow).
    """
    import numpy as np
    from PIL import Image

    images, where = [], []
    for f, data in _read_files(paths, "read_images", _IMAGE_SUFFIXES, kw.get("shuffle")):
        img = Image.open(io.BytesIO(data))
        if mode is not None:
            img = img.convert(mode)
        if size is not None:
            img = img.resize((size[1], size[0]))
        images.append(np.asarray(img))
        where.append(f)
    cols = {"image": images if len({a.shape for a in images}) != 1 else np.stack(images)}
    if include_paths:
        cols["path"] = where
    return Dataset(InMemorySource(block.columns_from(cols, "read_images")))


def read_binary_files(paths, *, include_paths: bool = False, **kw) -> Dataset:
    """Each file ``paths`` names as one row of column ``"bytes"`` (``"path"`` too with
    ``include_paths``), as Ray's ``read_binary_files``."""
    data, where = [], []
    for f, raw in _read_files(paths, "read_binary_files", (), kw.get("shuffle")):
        data.append(raw)
        where.append(f)
    cols = {"bytes": block.object_column(data), **({"path": where} if include_paths else {})}
    return Dataset(InMemorySource(block.columns_from(cols, "read_binary_files")))


__all__ = ["from_arrow", "range_tensor", "read_binary_files", "read_images", "read_numpy", "read_text"]
