"""A ``ray.data.Dataset`` as a raynb dataset: ``TorchTrainer(datasets={"train": ray_ds})``.

raynb's ranks are forked workers that never call Ray, and a ``streaming_split``
iterator is consumed through Ray. So the split happens in the driver (the notebook or
job that built the Ray Dataset, a Ray driver): ``fit()`` calls
``ray_ds.streaming_split(world_size, equal=True)`` and consumes the splits side by side
(one thread each, as Ray Train's ranks would), writing each one's blocks as Arrow IPC
files to ``<storage_path>/.ray_data/<id>/rank_<i>/`` (0700); rank ``i`` reads only its
own files behind the same ``get_dataset_shard("train").iter_torch_batches(...)``. Rows
are disjoint across ranks and equal in number (``equal=True`` drops at most
``world_size - 1`` rows, as in Ray). The files are removed when the fit ends.

This materializes the dataset before the run (bounded by the storage, not by memory);
it does not stream during training. Nothing here imports Ray at import time.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid

from . import block
from .sources import Schema


def is_ray_dataset(obj) -> bool:
    """True for a ``ray.data.Dataset`` (found without importing Ray)."""
    return any(c.__module__.startswith("ray.data") and c.__name__ == "Dataset" for c in type(obj).__mro__)


class RayPendingSource:
    """A Ray Dataset not split yet: only ``split`` (in the driver) makes it readable."""

    def __init__(self, ray_ds):
        self.ray_ds = ray_ds
        self.nbytes = 0

    def num_rows(self) -> int:
        return self.ray_ds.count()

    def schema(self) -> Schema:
        s = self.ray_ds.schema()
        return Schema(list(s.names), [str(t) for t in s.types])

    def split(self, world_size: int, root: str) -> "RaySplitSource":
        """``streaming_split(world_size, equal=True)``, each split written by a thread of
        its own to ``root/rank_<i>/<n>.arrow``."""
        import pyarrow as pa

        os.makedirs(root, mode=0o700, exist_ok=False)
        splits = self.ray_ds.streaming_split(world_size, equal=True)
        files: list[list[str]] = [[] for _ in range(world_size)]
        rows = [0] * world_size
        errors: list[BaseException] = []

        def consume(i: int) -> None:
            d = os.path.join(root, f"rank_{i}")
            os.makedirs(d, mode=0o700)
            try:
                for k, batch in enumerate(splits[i].iter_batches(batch_size=None, batch_format="pyarrow")):
                    path = os.path.join(d, f"{k:06d}.arrow")
                    with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, batch.schema) as w:
                        w.write_table(batch)
                    files[i].append(path)
                    rows[i] += batch.num_rows
            except BaseException as e:  # noqa: BLE001 - re-raised in the driver below
                errors.append(e)

        threads = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError(
                f"splitting the Ray Dataset for {world_size} ranks failed: "
                f"{type(errors[0]).__name__}: {errors[0]}"
            ) from errors[0]
        return RaySplitSource(files, rows, self.schema())


class RaySplitSource:
    """Each rank's Arrow files of a split Ray Dataset (see the module's docstring)."""

    nbytes = 0  # on disk, not in shared memory

    def __init__(self, files: list[list[str]], rows: list[int], schema: Schema):
        self.files, self.rows, self._schema = files, rows, schema

    def num_rows(self) -> int:
        return sum(self.rows)

    def schema(self) -> Schema:
        return self._schema

    def rank_stream(self, world_size: int, rank: int, seed, epoch: int, pad: bool, chunk: int):
        """Rank ``rank``'s blocks, in the order Ray's split gave them (no global shuffle:
        shuffle the Ray Dataset itself, ``random_shuffle()``, before ``fit()``)."""
        import pyarrow as pa

        if world_size != len(self.files):
            raise ValueError(f"this Ray Dataset was split for {len(self.files)} ranks, not {world_size}")
        for path in self.files[rank]:
            with pa.memory_map(path) as src:
                table = pa.ipc.open_file(src).read_all()
            cols = {name: table.column(name).to_numpy() for name in table.column_names}
            n = table.num_rows
            for s in range(0, n, chunk):
                yield block.take_rows(cols, slice(s, min(s + chunk, n)))


def split_ray_datasets(datasets: dict, world_size: int, storage_path: str) -> tuple[dict, list[str]]:
    """The datasets with each Ray one split for ``world_size`` ranks into files under
    ``storage_path/.ray_data``; returns (datasets, the directories to remove afterwards)."""
    out, dirs = {}, []
    if "://" in storage_path:
        from ..cluster.storage.rundir import default_storage_path
        from ..cluster.storage.storage_uri import is_storage_uri, local_path_of

        # An object store's run directory stages on the default storage path: so do the splits.
        storage_path = default_storage_path() if is_storage_uri(storage_path) else local_path_of(storage_path)
    for name, ds in datasets.items():
        if isinstance(getattr(ds, "_source", None), RayPendingSource):
            root = os.path.join(
                os.path.expanduser(storage_path), ".ray_data", f"{name}-{uuid.uuid4().hex[:8]}"
            )
            os.makedirs(os.path.dirname(root), mode=0o700, exist_ok=True)
            dirs.append(root)
            ds = ds._with(source=ds._source.split(world_size, root))
        out[name] = ds
    return out, dirs
