"""``ray.data.datasource``'s names: the custom-source interface (``read_task``,
``file_datasource``) and the custom-sink one (``datasink``, ``file_datasink``), with
``FileShuffleConfig`` and ``SaveMode``. Read a source with ``raynb.data.read_datasource``;
write to a sink with ``Dataset.write_datasink``."""

from __future__ import annotations

from .block_accessor import BlockMetadata
from .datasink import Datasink, TaskContext, WriteResult, WriteReturnType
from .file_datasink import BlockBasedFileDatasink, FilenameProvider, RowBasedFileDatasink
from .file_datasource import FileBasedDatasource
from .file_shuffle import FileShuffleConfig
from .read_task import Datasource, Reader, ReadTask
from .save_mode import SaveMode

__all__ = [
    "BlockBasedFileDatasink",
    "BlockMetadata",
    "Datasink",
    "Datasource",
    "FileBasedDatasource",
    "FileShuffleConfig",
    "FilenameProvider",
    "ReadTask",
    "Reader",
    "RowBasedFileDatasink",
    "SaveMode",
    "TaskContext",
    "WriteResult",
    "WriteReturnType",
]
