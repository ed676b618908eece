"""The file datasinks a user subclasses (Ray's ``RowBasedFileDatasink``: a file per row,
``BlockBasedFileDatasink``: a file per write task), their ``FilenameProvider``, and
``SaveMode`` handling of an existing directory. Files go through ``pyarrow.fs``, so a
path may be local or an object-store URI."""

from __future__ import annotations

import logging
import os
import posixpath
from typing import Any, Dict, Optional

from .block_accessor import BlockAccessor, as_table
from .datasink import Datasink, TaskContext, WriteResult
from .save_mode import SaveMode

logger = logging.getLogger(__name__)


class FilenameProvider:
    """Names the files a write makes (Ray's ``FilenameProvider``): by default
    ``[{dataset_uuid}_]{write_uuid}_{task_index:06}[.{file_format}]``."""

    def __init__(self, dataset_uuid: Optional[str] = None, file_format: Optional[str] = None):
        self.dataset_uuid, self.file_format = dataset_uuid, file_format

    def get_filename_for_task(self, write_uuid: str, task_index: int) -> str:
        name = f"{self.dataset_uuid}_" if self.dataset_uuid is not None else ""
        name += f"{write_uuid}_{task_index:06}"
        return name + (f".{self.file_format}" if self.file_format is not None else "")


def _filesystem_and_path(path: str, filesystem):
    import pyarrow.fs as pafs

    if filesystem is not None:
        return filesystem, path
    if "://" in str(path):
        return pafs.FileSystem.from_uri(str(path))
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(str(path)))


class _FileDatasink(Datasink):
    """What both file datasinks share: the directory, the save mode, the files' names."""

    def __init__(
        self,
        path: str,
        *,
        filesystem=None,
        try_create_dir: bool = True,
        open_stream_args: Optional[Dict[str, Any]] = None,
        filename_provider: Optional[FilenameProvider] = None,
        dataset_uuid: Optional[str] = None,
        file_format: Optional[str] = None,
        mode: SaveMode = SaveMode.APPEND,
    ):
        self.unresolved_path = path
        self.filesystem, self.path = _filesystem_and_path(path, filesystem)
        self.try_create_dir, self.open_stream_args = try_create_dir, dict(open_stream_args or {})
        self.filename_provider = filename_provider or FilenameProvider(dataset_uuid, file_format)
        self.dataset_uuid, self.file_format, self.mode = dataset_uuid, file_format, SaveMode(mode)
        if self.mode == SaveMode.UPSERT:
            raise ValueError(
                "SaveMode.UPSERT is for tables, not files: use APPEND, OVERWRITE, IGNORE or ERROR"
            )
        self.has_created_dir, self._skip_write = False, False

    def open_output_stream(self, path: str):
        return self.filesystem.open_output_stream(path, **self.open_stream_args)

    def on_write_start(self, schema=None) -> None:
        """Apply the save mode to an existing directory, then make it (``try_create_dir``).

        Raises:
            ValueError: the directory exists and the mode is ``ERROR`` / ``CREATE``.
        """
        import pyarrow.fs as pafs

        if self.filesystem.get_file_info(self.path).type != pafs.FileType.NotFound:
            if self.mode in (SaveMode.ERROR, SaveMode.CREATE):
                raise ValueError(
                    f"{self.path} already exists (mode={self.mode.value}); write to a new path, or "
                    "use mode='overwrite' / 'append' / 'ignore'"
                )
            if self.mode == SaveMode.IGNORE:
                logger.warning("SaveMode.IGNORE: %s exists, nothing written", self.path)
                self._skip_write = True
                return
            if self.mode == SaveMode.OVERWRITE:
                self.filesystem.delete_dir_contents(self.path)
            return
        if self.try_create_dir:
            if isinstance(self.filesystem, pafs.LocalFileSystem):
                os.makedirs(self.path, mode=0o700, exist_ok=True)  # private, as write_parquet's
            else:
                self.filesystem.create_dir(self.path, recursive=True)
            self.has_created_dir = True

    def write(self, blocks, ctx: TaskContext) -> None:
        """The task's blocks joined into one and written by ``write_block`` (none when empty)."""
        import pyarrow as pa

        if self._skip_write:
            return
        tables = [as_table(b) for b in blocks]
        if not tables or sum(t.num_rows for t in tables) == 0:
            return
        self.write_block(BlockAccessor(pa.concat_tables(tables, promote_options="default")), 0, ctx)

    def write_block(self, block: BlockAccessor, block_index: int, ctx: TaskContext):
        raise NotImplementedError

    def on_write_complete(self, write_result: WriteResult) -> None:
        if self.has_created_dir and write_result.num_rows == 0:
            self.filesystem.delete_dir(self.path)

    def _task_filename(self, ctx: TaskContext) -> str:
        return self.filename_provider.get_filename_for_task(
            ctx.kwargs.get("write_uuid", "raynb"), ctx.task_idx
        )

    @property
    def supports_distributed_writes(self) -> bool:
        return True


class RowBasedFileDatasink(_FileDatasink):
    """One file per row (Ray's ``RowBasedFileDatasink``): subclass it, implement
    ``write_row_to_file(row, file)`` (``row`` a dict of column -> value, ``file`` a
    ``pyarrow.NativeFile``), and call ``super().__init__(path, file_format=...)``."""

    def write_row_to_file(self, row: Dict[str, Any], file) -> None:
        raise NotImplementedError

    def write_block(self, block: BlockAccessor, block_index: int, ctx: TaskContext):
        base, dot, ext = self._task_filename(ctx).rpartition(".")
        base, ext = (base, f".{ext}") if dot else (ext, "")
        for row_index, row in enumerate(block.iter_rows(public_row_format=False)):
            name = f"{base}_{block_index:06}_{row_index:06}{ext}"
            with self.open_output_stream(posixpath.join(self.path, name)) as file:
                self.write_row_to_file(row, file)


class BlockBasedFileDatasink(_FileDatasink):
    """One file per write task (Ray's ``BlockBasedFileDatasink``): subclass it, implement
    ``write_block_to_file(block, file)`` (``block`` a ``BlockAccessor``: ``to_arrow()``,
    ``to_pandas()``, ...). ``min_rows_per_file`` rows go to each file (the last may hold
    fewer); None: one file per block of a ``repartition(n)``'d dataset, else one file."""

    def __init__(self, path: str, *, min_rows_per_file: Optional[int] = None, **file_datasink_kwargs):
        super().__init__(path, **file_datasink_kwargs)
        self._min_rows_per_file = min_rows_per_file

    def write_block_to_file(self, block: BlockAccessor, file) -> None:
        raise NotImplementedError

    def write_block(self, block: BlockAccessor, block_index: int, ctx: TaskContext):
        with self.open_output_stream(posixpath.join(self.path, self._task_filename(ctx))) as file:
            self.write_block_to_file(block, file)

    @property
    def min_rows_per_write(self) -> Optional[int]:
        return self._min_rows_per_file


__all__ = ["BlockBasedFileDatasink", "FilenameProvider", "RowBasedFileDatasink"]
