"""Datasets for training (names as in ``ray.data``): in-memory data shared once per node
through shared memory, files streamed per rank, lazy per-row and per-batch transforms,
whole-dataset operations computed in the notebook. See docs/data.md."""

from .compute import ActorPoolStrategy, ComputeStrategy, TaskPoolStrategy
from .context import DataContext, DatasetContext, ExecutionOptions, ExecutionResources
from .dataset import Dataset, MaterializedDataset, register_map_batches_executor
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
from .sources import Schema

__all__ = [
    "ActorPoolStrategy",
    "ComputeStrategy",
    "DataContext",
    "DataIterator",
    "DatasetContext",
    "Dataset",
    "ExecutionOptions",
    "ExecutionResources",
    "GroupedData",
    "MapBatchesError",
    "MaterializedDataset",
    "Preprocessor",
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
