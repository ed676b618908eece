"""Reading a dataset in this process (Ray Data's consumption methods): ``show``, ``take``,
``take_batch``, ``take_all``, ``count``, ``schema``, ``columns``, ``to_pandas``,
``iter_batches``, ``iter_rows``, ``iter_torch_batches``, ``materialize``.

A mixin of ``Dataset``: these run the dataset's steps here, reading it as one rank of
one would (epoch 0 of a shuffle).
"""

from __future__ import annotations

from . import block

_ROWS_PER_FILE = ("rows_per_file", "num_rows_per_file", "min_rows_per_file", "max_rows_per_file")


class ConsumeMixin:
    """The consumption methods of ``Dataset`` (see the module's docstring)."""

    def _reader(self):
        from .iterator import DataIterator

        return DataIterator(self, 1, 0)

    def _collect(self, limit: int | None = None) -> dict:
        """Every row (or the first ``limit``) as one numpy batch ({} for none)."""
        parts, have = [], 0
        for batch in self.iter_batches(batch_size=None, prefetch_batches=0):
            n = block.num_rows(batch)
            if limit is not None and have + n > limit:
                batch, n = block.take_rows(batch, slice(0, limit - have)), limit - have
            if n:
                parts.append(batch)
            have += n
            if limit is not None and have >= limit:
                break
        return block.concat(parts) if parts else {}

    def count(self) -> int:
        """Rows in the dataset (running its steps when there are any)."""
        if not self._ops:
            return self._source.num_rows()
        return sum(block.num_rows(b) for b in self.iter_batches(batch_size=None, prefetch_batches=0))

    def schema(self, fetch_if_missing: bool = True):
        """Column names and types (a ``Schema``; with steps, of the first batch)."""
        if not self._ops:
            return self._source.schema()
        from .sources import _schema_of_columns

        for b in self.iter_batches(batch_size=None, prefetch_batches=0):
            if b:
                return _schema_of_columns(b)
        return self._source.schema()

    def columns(self, fetch_if_missing: bool = True) -> list:
        """The column names."""
        return self.schema().names

    def take_batch(self, batch_size: int = 20, *, batch_format: str | None = "default"):
        """The first ``batch_size`` rows as one batch (in the dataset's order).

        Raises:
            ValueError: the dataset has no rows (as Ray).
        """
        fmt = block.check_batch_format(batch_format)
        batch = self._collect(batch_size)
        if not batch:
            raise ValueError("take_batch(): the dataset has no rows")
        return block.to_format(batch, fmt)

    def take(self, limit: int = 20) -> list:
        """The first ``limit`` rows, as a list of dicts of column -> value."""
        return block.rows_of(self._collect(limit)) if limit > 0 else []

    def take_all(self, limit: int | None = None) -> list:
        """Every row, as a list of dicts.

        Raises:
            ValueError: more rows than ``limit`` (as Ray).
        """
        rows = block.rows_of(self._collect(None if limit is None else limit + 1))
        if limit is not None and len(rows) > limit:
            raise ValueError(f"take_all(limit={limit}): the dataset has more than {limit} rows")
        return rows

    def show(self, limit: int = 20) -> None:
        """Print the first ``limit`` rows, one dict a line (as Ray)."""
        for row in self.take(limit):
            print(row)

    def iter_rows(self):
        """Every row, as a dict of column -> value, read in this process."""
        return self._reader().iter_rows()

    def to_pandas(self, limit: int | None = None):
        """Every row as one ``pandas.DataFrame``.

        Raises:
            ValueError: ``limit`` is negative, or the dataset has more rows than it (as Ray;
                ``ds.limit(n).to_pandas()`` takes the first n).
        """
        import pandas as pd

        if limit is not None and limit < 0:
            raise ValueError(f"to_pandas(limit={limit!r}): give a number of rows >= 0, or None for all")
        batch = self._collect(None if limit is None else limit + 1)
        if limit is not None and block.num_rows(batch) > limit:
            raise ValueError(
                f"to_pandas(limit={limit}): the dataset has more than {limit} rows; take the "
                "first ones with ds.limit(n).to_pandas()"
            )
        return block.to_format(batch, "pandas") if batch else pd.DataFrame()

    def write_parquet(self, path: str, **kwargs) -> list:
        """Stream the rows, in order, to parquet files in the directory ``path``
        (``raynb.data.write.write_files``: one batch in memory at a time; a file per
        block after ``repartition(n)``; ``num_rows_per_file`` / ``min_rows_per_file`` /
        ``max_rows_per_file``: rows per file).

        Raises:
            TypeError: an argument other than those (named).
        """
        return self._write(path, "parquet", kwargs)

    def write_csv(self, path: str, **kwargs) -> list:
        """As ``write_parquet``, to CSV files with a header row."""
        return self._write(path, "csv", kwargs)

    def write_json(self, path: str, **kwargs) -> list:
        """As ``write_parquet``, to JSON Lines files (one object per row, as Ray's)."""
        return self._write(path, "json", kwargs)

    def _write(self, path: str, file_format: str, kwargs: dict) -> list:
        from .write import write_files

        per_file = [kwargs.pop(k) for k in _ROWS_PER_FILE if kwargs.get(k) is not None]
        for k in _ROWS_PER_FILE:
            kwargs.pop(k, None)
        if kwargs:
            raise TypeError(
                f"write_{file_format}() got unexpected arguments {sorted(kwargs)}; raynb writes "
                "local files (path) and takes num_rows_per_file / min_rows_per_file / max_rows_per_file"
            )
        return write_files(self, path, file_format, rows_per_file=per_file[0] if per_file else None)

    def iter_batches(self, **kwargs):
        """All rows' batches in this process (one epoch, as a single rank would read them):
        the arguments of ``DataIterator.iter_batches``."""
        return self._reader().iter_batches(**kwargs)

    def to_tf(self, feature_columns, label_columns=None, **kwargs):
        """All rows as a ``tf.data.Dataset`` of ``(features, labels)`` in this process (Ray's
        ``Dataset.to_tf``; see ``raynb.data.tf_dataset.to_tf``)."""
        from .tf_dataset import to_tf

        return to_tf(self._reader(), feature_columns, label_columns, **kwargs)

    def iter_torch_batches(self, **kwargs):
        """All rows as torch batches in this process (``DataIterator.iter_torch_batches``)."""
        return self._reader().iter_torch_batches(**kwargs)

    def materialize(self):
        """The rows computed now and held in memory (a ``MaterializedDataset``): steps and
        a shuffle's epoch-0 order applied once; in a run, its columns go to shared memory."""
        return self._materialized(self._collect())
