"""Datasets for training (names as in ``ray.data``): in-memory data shared once per node
through shared memory, files streamed per rank, lazy per-row and per-batch transforms,
whole-dataset operations computed in the notebook. See docs/data.md."""

from .compute import ActorPoolStrategy, ComputeStrategy, TaskPoolStrategy
from .context import DataContext, DatasetContext, ExecutionOptions, ExecutionResources
from .dataset import Dataset, MaterializedDataset, register_map_batches_executor
from .datasink import Datasink
from .datasource import BlockBasedFileDatasink, Datasource, ReadTask, RowBasedFileDatasink
from .datasource_read import read_datasource
from .file_shuffle import FileShuffleConfig
from .grouped import GroupedData
from .iterator import DataIterator, MapBatchesError
from .more_sources import from_arrow, range_tensor, read_binary_files, read_images, read_numpy, read_text
from .preprocessors import Preprocessor
from .read_api import (
    from_items,
    from_numpy,
    from_pandas,
    from_torch,
    range,
    read_csv,
    read_json,
    read_parquet,
)
from .save_mode import SaveMode
from .sources import Schema

DatasetIterator = DataIterator  # Ray's older name, kept as an alias there too

__all__ = [
    "ActorPoolStrategy",
    "BlockBasedFileDatasink",
    "ComputeStrategy",
    "DataContext",
    "DataIterator",
    "Dataset",
    "DatasetContext",
    "DatasetIterator",
    "Datasink",
    "Datasource",
    "ExecutionOptions",
    "ExecutionResources",
    "FileShuffleConfig",
    "GroupedData",
    "MapBatchesError",
    "MaterializedDataset",
    "Preprocessor",
    "ReadTask",
    "RowBasedFileDatasink",
    "SaveMode",
    "Schema",
    "TaskPoolStrategy",
    "from_arrow",
    "from_items",
    "from_numpy",
    "from_pandas",
    "from_torch",
    "range",
    "range_tensor",
    "read_binary_files",
    "read_csv",
    "read_datasource",
    "read_images",
    "read_json",
    "read_numpy",
    "read_parquet",
    "read_text",
    "register_map_batches_executor",
]


def __getattr__(name: str):
    from .not_served import not_served

    raise not_served("ray.data", name)
