"""A dataset's rows out of the stream: into pandas, or into parquet files, one batch in
memory at a time (``Dataset.to_pandas``, ``Dataset.write_parquet``), and numpy batches as
arrow tables (what batch inference's ranks write)."""

from __future__ import annotations

import os

from . import block
from .block import batch_to_table  # noqa: F401 - its old home; batch inference imports it here


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


def write_parquet(dataset, path: str, *, rows_per_file: int | None = None) -> list[str]:
    """Write the rows, in order, as parquet files ``part-000000.parquet``, ... in the
    directory ``path`` (made if missing, 0700), streaming: one batch in memory at a time,
    each a row group; a new file every ``rows_per_file`` rows (None: one file).

    Returns:
        list[str]: the files written.

    Raises:
        FileExistsError: ``path`` holds parquet files already (they would mix with these).
    """
    import pyarrow.parquet as pq

    os.makedirs(path, mode=0o700, exist_ok=True)
    if any(n.endswith(".parquet") for n in os.listdir(path)):
        raise FileExistsError(
            f"write_parquet({path!r}): the directory already holds parquet files; "
            "write to a new directory (or remove them first)"
        )
    files, writer, in_file = [], None, 0
    try:
        for batch in dataset.iter_batches(batch_size=None, prefetch_batches=1):
            table = batch_to_table(batch)
            if writer is not None and rows_per_file and in_file >= rows_per_file:
                writer.close()
                writer = None
            if writer is None:
                files.append(os.path.join(path, f"part-{len(files):06d}.parquet"))
                writer, in_file = pq.ParquetWriter(files[-1], table.schema), 0
            writer.write_table(table)
            in_file += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    return files
