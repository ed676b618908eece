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
from .framework_sources import from_huggingface, from_tf
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
    read_orc,
    read_parquet,
)
from .save_mode import SaveMode
from .services import REFUSALS
from .sources import Schema
from .sql import read_sql
from .tfrecords import read_tfrecords
from .webdataset import read_webdataset

DatasetIterator = DataIterator  # Ray's older name, kept as an alias there too
NodeIdStr = str  # Ray's type alias of a node id

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
    "NodeIdStr",
    "Preprocessor",
    "ReadTask",
    "RowBasedFileDatasink",
    "SaveMode",
    "Schema",
    "TaskPoolStrategy",
    "from_arrow",
    "from_huggingface",
    "from_items",
    "from_numpy",
    "from_pandas",
    "from_tf",
    "from_torch",
    "range",
    "range_tensor",
    "read_binary_files",
    "read_csv",
    "read_datasource",
    "read_images",
    "read_json",
    "read_numpy",
    "read_orc",
    "read_parquet",
    "read_sql",
    "read_text",
    "read_tfrecords",
    "read_webdataset",
    "register_map_batches_executor",
    *sorted(REFUSALS),  # Ray's names that need a service raynb lacks: they say so when called
]


def __getattr__(name: str):
    from .not_served import not_served

    if name in REFUSALS:  # a function that says why when called (services raynb lacks)
        return REFUSALS[name]
    raise not_served("ray.data", name)
