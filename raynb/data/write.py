"""A dataset's rows out of the stream: into pandas, or into parquet files, one batch in
memory at a time (``Dataset.to_pandas``, ``Dataset.write_parquet``), and numpy batches as
arrow tables (what batch inference's ranks write)."""

from __future__ import annotations

import os

from . import block
from .block import batch_to_table  # noqa: F401 - its old home; batch inference imports it here


def rows_per_block(dataset) -> int | None:
    """Rows per piece when the dataset was repartitioned into blocks (one file or write task
    per block, as Ray writes them), else None."""
    blocks = getattr(dataset, "_num_blocks", None)
    return max(1, -(-dataset.count() // blocks)) if blocks else None


def to_pandas(dataset, limit: int | None = None):
    """Every row (or the first ``limit``) as one ``pandas.DataFrame``, read in this process.

    Raises:
        ValueError: ``limit`` is negative.
    """
    import pandas as pd

    if limit is not None and limit < 0:
        raise ValueError(f"to_pandas(limit={limit!r}): give a number of rows >= 0, or None for all")
    parts, have = [], 0
    for batch in dataset.iter_batches(batch_size=None, prefetch_batches=1):
        if limit is not None and have + block.num_rows(batch) > limit:
            batch = block.take_rows(batch, slice(0, limit - have))
        parts.append(block.to_format(batch, "pandas"))
        have += block.num_rows(batch)
        if limit is not None and have >= limit:
            break
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


_SUFFIX = {"parquet": ".parquet", "csv": ".csv", "json": ".json"}


def write_files(
    dataset, path: str, file_format: str = "parquet", *, rows_per_file: int | None = None
) -> list[str]:
    """Write the rows, in order, as ``part-000000.<format>``, ... in the directory
    ``path`` (made if missing, 0700), streaming one batch at a time: parquet (a row
    group per batch), csv (with a header) or json (JSON Lines, as Ray writes). A new file
    every ``rows_per_file`` rows; without it, one file per block of a dataset given a
    block count by ``repartition(n)`` (as Ray writes a file per block), else one file.

    Returns:
        list[str]: the files written.

    Raises:
        FileExistsError: ``path`` holds files of that format already (they would mix).
        ValueError: an unknown format.
    """
    if file_format not in _SUFFIX:
        raise ValueError(f"write_files(file_format={file_format!r}): use one of {sorted(_SUFFIX)}")
    suffix = _SUFFIX[file_format]
    os.makedirs(path, mode=0o700, exist_ok=True)
    if any(n.endswith(suffix) for n in os.listdir(path)):
        raise FileExistsError(
            f"write_{file_format}({path!r}): the directory already holds {suffix} files; "
            "write to a new directory (or remove them first)"
        )
    if rows_per_file is None:
        rows_per_file = rows_per_block(dataset)
    files, writer, in_file = [], None, 0
    try:
        for batch in dataset.iter_batches(batch_size=rows_per_file, prefetch_batches=1):
            table = batch_to_table(batch)
            if writer is not None and rows_per_file and in_file >= rows_per_file:
                writer.close()
                writer = None
            if writer is None:
                files.append(os.path.join(path, f"part-{len(files):06d}{suffix}"))
                writer, in_file = _Writer(files[-1], file_format, table.schema), 0
            writer.write(table)
            in_file += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    return files


def write_parquet(dataset, path: str, *, rows_per_file: int | None = None) -> list[str]:
    """``write_files(dataset, path, "parquet", rows_per_file=...)``."""
    return write_files(dataset, path, "parquet", rows_per_file=rows_per_file)


class _Writer:
    """One output file of ``file_format``, written a table at a time."""

    def __init__(self, path: str, file_format: str, schema):
        self.format = file_format
        if file_format == "parquet":
            import pyarrow.parquet as pq

            self._w = pq.ParquetWriter(path, schema)
        elif file_format == "csv":
            import pyarrow.csv as pc

            self._w = pc.CSVWriter(path, schema)
        else:
            self._f = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, table) -> None:
        if self.format == "json":
            table.to_pandas().to_json(self._f, orient="records", lines=True)
        else:
            self._w.write_table(table)

    def close(self) -> None:
        (self._f if self.format == "json" else self._w).close()
