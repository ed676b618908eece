"""Datasets for training (names as in ``ray.data``): in-memory data shared once per node
through shared memory, files streamed per rank, global shuffles, lazy ``map_batches``."""
from .dataset import Dataset, register_map_batches_executor
from .iterator import DataIterator, MapBatchesError
from .read_api import from_numpy, from_pandas, from_torch, read_csv, read_parquet
from .sources import Schema

__all__ = ["DataIterator", "Dataset", "MapBatchesError", "Schema", "from_numpy", "from_pandas",
           "from_torch", "read_csv", "read_parquet", "register_map_batches_executor"]
