"""Making datasets (the names of ``ray.data``): from notebook arrays, or from files."""

from __future__ import annotations

import builtins
import glob
import os

from . import block
from .dataset import Dataset
from .sources import FileSource, InMemorySource


def from_numpy(data, override_num_blocks: int | None = None) -> Dataset:
    """A dataset of a numpy array (one column, ``"data"``, as Ray) or of a dict of
    column name -> array (rows along the first axis; columns may have more dimensions).

    Raises:
        ValueError: columns of different lengths, or an object column, named.
        TypeError: not an array or a dict of arrays.
    """
    import numpy as np

    if isinstance(data, dict):
        return Dataset(InMemorySource(block.columns_from(data, "from_numpy")))
    if isinstance(data, list) and data and all(isinstance(a, np.ndarray) for a in data):
        data = np.concatenate(data)  # Ray: a list of arrays, joined along the rows
    if isinstance(data, np.ndarray):
        return Dataset(InMemorySource(block.columns_from({"data": data}, "from_numpy")))
    raise TypeError(f"from_numpy() takes a numpy array or a dict of them, got {type(data).__name__}")


def from_items(
    items: list,
    *,
    output_arrow_format: bool = False,
    override_num_blocks: int | None = None,
    parallelism: int = -1,
) -> Dataset:
    """A dataset of a list of rows: dicts of column -> value (the columns of the first
    row), or any other values (one column, ``"item"``, as Ray). Values may be numbers,
    arrays, strings, lists, dicts or any Python objects (see docs/data.md for how each
    kind reaches the ranks).

    Raises:
        TypeError: ``items`` is not a list / tuple.
        ValueError: no items; a dict row with other columns than the first (both named).
    """
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"from_items() takes a list of rows, got {type(items).__name__}")
    if not items:
        raise ValueError("from_items([]): give at least one row")
    if all(isinstance(r, dict) for r in items):
        from .transforms import from_rows

        return Dataset(InMemorySource(from_rows(list(items), "from_items")))
    if any(isinstance(r, dict) for r in items):
        raise ValueError("from_items(): rows are all dicts (columns) or all plain values, not a mix")
    return Dataset(InMemorySource(block.columns_from({"item": block.as_column(list(items))}, "from_items")))


def range(n: int, *, override_num_blocks: int | None = None, parallelism: int = -1) -> Dataset:  # noqa: A001
    """A dataset of the integers ``0 .. n-1`` in one int64 column, ``"id"`` (as Ray).

    Raises:
        ValueError: ``n`` negative or not an int.
    """
    import numpy as np

    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"range({n!r}): give an integer >= 0")
    return Dataset(InMemorySource({"id": np.arange(n, dtype=np.int64)}))


def from_pandas(df, override_num_blocks: int | None = None) -> Dataset:
    """A dataset of a ``pandas.DataFrame``'s columns (or of a list of them, joined).
    Columns of strings or other Python objects become object columns (see docs/data.md).

    Raises:
        TypeError: not a DataFrame.
    """
    import pandas as pd

    if isinstance(df, list):
        df = pd.concat(df, ignore_index=True)
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"from_pandas() takes a pandas DataFrame, got {type(df).__name__}")
    return Dataset(
        InMemorySource(block.columns_from({str(c): df[c].to_numpy() for c in df.columns}, "from_pandas"))
    )


def from_torch(dataset, column_names: list | None = None) -> Dataset:
    """A dataset of a ``torch.utils.data.TensorDataset`` (its tensors, zero copy until
    they are written to shared memory), or of any map-style dataset whose items are
    tensors, numbers or tuples of them (read item by item).

    Columns are named ``column_names``, else ``"item"`` for one tensor and ``"item_0"``,
    ``"item_1"``, ... for several.

    Raises:
        ValueError: tensors of different lengths, or the wrong number of names.
        TypeError: not a map-style dataset (an IterableDataset has no length).
    """
    import numpy as np
    import torch
    from torch.utils.data import TensorDataset

    if isinstance(dataset, TensorDataset):
        parts = [t.detach().cpu().numpy() for t in dataset.tensors]
    else:
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise TypeError(f"from_torch() takes a map-style torch Dataset, got {type(dataset).__name__}")
        items = [dataset[i] for i in builtins.range(len(dataset))]
        first = items[0] if items else ()
        k = len(first) if isinstance(first, (tuple, list)) else 1
        rows = [it if isinstance(it, (tuple, list)) else (it,) for it in items]
        parts = [
            np.stack([r[j].numpy() if isinstance(r[j], torch.Tensor) else np.asarray(r[j]) for r in rows])
            for j in builtins.range(k)
        ]
    names = column_names or (
        ["item"] if len(parts) == 1 else [f"item_{i}" for i in builtins.range(len(parts))]
    )
    if len(names) != len(parts):
        raise ValueError(f"from_torch(column_names={names}): the dataset has {len(parts)} tensors")
    return Dataset(InMemorySource(block.columns_from(dict(zip(names, parts)), "from_torch")))


def _resolve(paths, what: str, shuffle=None):
    """(files, filesystem) for local paths, globs, directories or ``pyarrow.fs`` URIs,
    in the order a ``FileShuffleConfig`` ``shuffle`` draws (as given when None).

    Raises:
        FileNotFoundError: a path (or glob) that matches nothing, named.
    """
    import pyarrow.fs as pafs

    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not items:
        raise ValueError(f"{what}: no paths given")
    files, fs = [], None
    for item in map(str, items):
        if "://" in item:
            fs, path = pafs.FileSystem.from_uri(item)
        else:
            fs, path = pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(item))
            if glob.has_magic(path):
                found = sorted(glob.glob(path))
                if not found:
                    raise FileNotFoundError(f"{what}: no file matches {item!r}")
                files += found
                continue
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(
                f"{what}: {item!r} does not exist (every node must be able to read "
                "it: a shared filesystem, or a pyarrow.fs URI such as s3://...)"
            )
        if info.type == pafs.FileType.Directory:
            sel = pafs.FileSelector(path, recursive=True)
            files += sorted(
                i.path
                for i in fs.get_file_info(sel)
                if i.type == pafs.FileType.File and not os.path.basename(i.path).startswith((".", "_"))
            )
        else:
            files.append(path)
    if not files:
        raise FileNotFoundError(f"{what}: no files in {items}")
    from .file_shuffle import shuffled_files

    return shuffled_files(files, shuffle, what), fs


def read_parquet(paths, *, columns: list | None = None, shuffle=None) -> Dataset:
    """A dataset streamed from parquet files (``pyarrow.dataset``): each rank reads only
    its own row groups, whole ones when they divide evenly among the ranks, row ranges
    otherwise, in a background thread (bounded memory: about a row group and
    ``prefetch_batches`` batches per rank).

    Args:
        paths (str | list[str]): files, directories, globs (``data/*.parquet``) or
            ``pyarrow.fs`` URIs; every node must be able to read them.
        columns (list[str] | None): the columns to read.
        shuffle (FileShuffleConfig | "files" | None): the files' order, drawn from its seed.

    Raises:
        FileNotFoundError: a path that does not exist (named), before any run starts.
        ValueError: a column the files do not have.
        OSError: a file that is not parquet (pyarrow's message, with the file).
    """
    import pyarrow.dataset as ds

    files, fs = _resolve(paths, "read_parquet", shuffle)
    return Dataset(FileSource(files, fs, ds.ParquetFileFormat(), columns))


def read_csv(
    paths,
    *,
    columns: list | None = None,
    parse_options=None,
    convert_options=None,
    read_options=None,
    shuffle=None,
) -> Dataset:
    """A dataset streamed from csv files (``pyarrow.dataset``), each file a unit of
    sharding (its rows are counted once, here). Options are ``pyarrow.csv``'s.

    Raises:
        FileNotFoundError: a path that does not exist (named), before any run starts.
    """
    import pyarrow.dataset as ds

    files, fs = _resolve(paths, "read_csv", shuffle)
    fmt = ds.CsvFileFormat(
        parse_options=parse_options, convert_options=convert_options, read_options=read_options
    )
    return Dataset(FileSource(files, fs, fmt, columns))


def read_json(
    paths,
    *,
    lines: bool = True,
    columns: list | None = None,
    read_options=None,
    parse_options=None,
    shuffle=None,
    **kwargs,
) -> Dataset:
    """A dataset streamed from JSON Lines files (one object a line; ``pyarrow.json``),
    each file a unit of sharding.

    Raises:
        FileNotFoundError: a path that does not exist (named), before any run starts.
        NotImplementedError: ``lines=False`` (a whole-file JSON array is not streamed) or
            another Ray argument (named).
    """
    import pyarrow.dataset as ds

    if not lines:
        raise NotImplementedError(
            "read_json(lines=False): raynb reads JSON Lines files (one object a line); "
            "load a JSON array with pandas and use from_pandas (see docs/data.md)"
        )
    if kwargs:
        raise NotImplementedError(f"read_json(): {sorted(kwargs)} not served by raynb; see docs/data.md")
    files, fs = _resolve(paths, "read_json", shuffle)
    return Dataset(
        FileSource(
            files, fs, ds.JsonFileFormat(read_options=read_options, parse_options=parse_options), columns
        )
    )


def read_orc(paths, *, columns: list | None = None, shuffle=None, **kwargs) -> Dataset:
    """A dataset streamed from ORC files (``pyarrow.dataset``'s ORC format), each file a
    unit of sharding, as Ray's ``read_orc``.

    Raises:
        FileNotFoundError: a path that does not exist (named), before any run starts.
        ValueError: a column the files do not have.
    """
    import pyarrow.dataset as ds

    files, fs = _resolve(paths, "read_orc", shuffle)
    return Dataset(FileSource(files, fs, ds.OrcFileFormat(), columns))
