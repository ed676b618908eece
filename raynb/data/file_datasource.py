"""``FileBasedDatasource``: Ray's base for a custom file type. A subclass implements
``_read_stream(f, path)`` (yield blocks: pyarrow Tables or pandas DataFrames of one
file); the files are split among read tasks, which the ranks of a run read
(``datasource_read``). Their rows are not known ahead, so each task is read once more
where the dataset is made, to count them."""

from __future__ import annotations

from typing import Iterator, List, Optional

from .block_accessor import BlockMetadata, as_table
from .read_task import Datasource, ReadTask


class FileBasedDatasource(Datasource):
    """A datasource of files (Ray's ``FileBasedDatasource``).

    Args:
        paths (str | list[str]): files, directories, globs or ``pyarrow.fs`` URIs.
        filesystem: a ``pyarrow.fs`` filesystem (found from the paths when None).
        open_stream_args (dict | None): passed to ``open_input_stream``.
        shuffle (FileShuffleConfig | "files" | None): the files' order.
        include_paths (bool): add a ``"path"`` column.
        file_extensions (list[str] | None): keep only files with these extensions
            (``_FILE_EXTENSIONS`` is the default of Ray's ``read_*`` functions, not used here).

    Raises:
        FileNotFoundError: a path that does not exist, or no file with the extensions.
    """

    _FILE_EXTENSIONS: Optional[List[str]] = None

    def __init__(
        self,
        paths,
        *,
        filesystem=None,
        open_stream_args: Optional[dict] = None,
        shuffle=None,
        include_paths: bool = False,
        file_extensions: Optional[List[str]] = None,
        **ray_args,
    ):
        from .read_api import _resolve

        super().__init__()
        files, fs = _resolve(paths, type(self).__name__, shuffle)
        exts = file_extensions
        if exts:
            files = [f for f in files if f.lower().endswith(tuple("." + e.lstrip(".").lower() for e in exts))]
            if not files:
                raise FileNotFoundError(f"{type(self).__name__}: no file in {paths!r} ends in {list(exts)}")
        self._paths, self._filesystem = files, filesystem or fs
        self._open_stream_args, self._include_paths = dict(open_stream_args or {}), include_paths

    def _read_stream(self, f, path: str) -> Iterator:
        """Yield the blocks of one open file ``f`` (a ``pyarrow.NativeFile``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _read_stream(self, f, path)")

    def _open_input_source(self, filesystem, path: str, **open_args):
        return filesystem.open_input_stream(path, **open_args)

    def _read_files(self, paths: list):
        import pyarrow as pa

        for path in paths:
            with self._open_input_source(self._filesystem, path, **self._open_stream_args) as f:
                for blk in self._read_stream(f, path):
                    table = as_table(blk)
                    if self._include_paths:
                        table = table.append_column("path", pa.array([path] * table.num_rows))
                    yield table

    def estimate_inmemory_data_size(self) -> Optional[int]:
        return sum(i.size or 0 for i in self._filesystem.get_file_info(self._paths))

    def get_read_tasks(self, parallelism: int, per_task_row_limit=None, data_context=None) -> List[ReadTask]:
        """At most ``parallelism`` tasks, each reading a run of consecutive files."""
        n = max(1, min(parallelism, len(self._paths)))
        groups = [self._paths[i * len(self._paths) // n : (i + 1) * len(self._paths) // n] for i in range(n)]
        return [
            ReadTask(
                lambda g=g: self._read_files(g),
                BlockMetadata(num_rows=None, size_bytes=None, input_files=tuple(g)),
                per_task_row_limit=per_task_row_limit,
            )
            for g in groups
            if g
        ]

    @property
    def supports_distributed_reads(self) -> bool:
        return True


__all__ = ["FileBasedDatasource"]
