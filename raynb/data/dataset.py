"""``Dataset``: rows from notebook arrays or files, with lazy per-batch transformations.

A dataset is a source (``sources``) and a list of operations. Operations are lazy:
``map_batches`` records a function that each rank runs on its own batches as it
iterates (inside the prefetch thread, so it overlaps the training step); in the
notebook, ``take`` / ``iter_batches`` / ``count`` run them on the spot.

Other modules add operations through :func:`register_map_batches_executor`: Ray's
``map_batches(..., num_workers=N)`` (a pool of workers running the function over the
whole dataset: batch inference) is not the lazy per-rank path and is reserved for
that executor; without one registered it raises ``NotImplementedError``.
"""
from __future__ import annotations

import random
from typing import Callable

from . import block as B
from .iterator import DataIterator, MapBatchesError

_executors: dict[str, Callable] = {}


def register_map_batches_executor(impl: Callable, name: str = "batch_inference") -> None:
    """Install what ``Dataset.map_batches(fn, num_workers=N, ...)`` calls:
    ``impl(dataset, fn, batch_format=..., num_workers=N, **kwargs)`` returning a Dataset
    (e.g. the predictions, computed on N ranks). One executor per ``name``; the latest
    registered one is used."""
    _executors[name] = impl


class MapBatches:
    """One ``map_batches`` step: ``fn(batch, **fn_kwargs)`` on batches in ``batch_format``."""

    def __init__(self, fn: Callable, batch_format: str, fn_kwargs: dict | None):
        self.fn, self.batch_format, self.fn_kwargs = fn, batch_format, dict(fn_kwargs or {})

    @property
    def name(self) -> str:
        return getattr(self.fn, "__qualname__", None) or type(self.fn).__name__

    def __call__(self, batch: dict, index: int, rank: int) -> dict:
        try:
            out = self.fn(B.to_format(batch, self.batch_format), **self.fn_kwargs)
        except Exception as e:
            raise MapBatchesError(f"map_batches({self.name}) raised on batch {index} of rank {rank}: "
                                  f"{type(e).__name__}: {e}") from e
        return B.to_numpy_batch(out, f"map_batches({self.name}) on batch {index}")


class Dataset:
    """Rows to train on (after ``ray.data.Dataset``). Make one with ``raynb.data.from_numpy``,
    ``from_pandas``, ``from_torch``, ``read_parquet``, ``read_csv``; pass it as
    ``TorchTrainer(datasets={"train": ds})`` and read ``raynb.train.get_dataset_shard("train")``
    on each rank. Transformations return a new Dataset; the original is unchanged.
    """

    def __init__(self, source, ops: tuple = (), seed: int | None = None):
        self._source, self._ops, self._seed = source, tuple(ops), seed

    def _with(self, **changes) -> "Dataset":
        parts = {"source": self._source, "ops": self._ops, "seed": self._seed, **changes}
        return Dataset(parts["source"], parts["ops"], parts["seed"])

    def _apply_ops(self, batch: dict, index: int, rank: int) -> dict:
        for op in self._ops:
            batch = op(batch, index, rank)
        return batch

    # -- transformations -------------------------------------------------------------
    def map_batches(self, fn: Callable, *, batch_format: str = "numpy", fn_kwargs: dict | None = None,
                    num_workers: int | None = None, **kwargs) -> "Dataset":
        """``fn(batch) -> batch`` applied lazily to every batch, on the ranks as they read.

        Args:
            fn: takes a batch in ``batch_format`` (a dict of numpy arrays, or a DataFrame)
                and returns a dict of arrays or a DataFrame (rows may change in number).
            batch_format ("numpy" | "pandas"): what ``fn`` is given.
            fn_kwargs (dict | None): keyword arguments for ``fn``.
            num_workers (int | None): None (the default) is the lazy per-rank path.
                An int is Ray's distributed form (batch inference over the whole dataset
                on that many workers): reserved for the executor another module registers
                (``register_map_batches_executor``), which gets ``**kwargs`` too.

        Raises:
            ValueError: an unknown ``batch_format``.
            TypeError: ``fn`` is not callable, is a class without ``num_workers``, or extra
                keyword arguments without ``num_workers``.
            NotImplementedError: ``num_workers`` given and no executor is registered.
        """
        fmt = B.check_batch_format(batch_format)
        if not callable(fn):
            raise TypeError(f"map_batches() takes a function of a batch, got {type(fn).__name__}")
        if num_workers is not None:
            impl = _executors.get("batch_inference")
            if impl is None:
                raise NotImplementedError(
                    "map_batches(num_workers=...) runs the function over the whole dataset on a pool "
                    "of workers (batch inference); no such executor is installed in this raynb. Leave "
                    "num_workers out to apply fn lazily on each rank's batches")
            return impl(self, fn, batch_format=fmt, num_workers=num_workers, fn_kwargs=fn_kwargs, **kwargs)
        if kwargs:
            raise TypeError(f"map_batches() got unexpected arguments {sorted(kwargs)} (they belong to "
                            "the num_workers= path)")
        if isinstance(fn, type):  # it would be called with a batch as its constructor's argument
            raise TypeError(f"map_batches({fn.__name__}) is a class: a class is built once per worker on "
                            "the batch-inference path, map_batches(cls, num_workers=N, fn_constructor_kwargs="
                            "{...}); for the lazy per-rank path pass a function or an instance")
        return self._with(ops=self._ops + (MapBatches(fn, fmt, fn_kwargs),))

    def random_shuffle(self, *, seed: int | None = None) -> "Dataset":
        """Shuffle all rows globally, anew each epoch: epoch ``e`` reads the permutation
        drawn from ``(seed, e)``, the same on every rank (rows move between ranks from one
        epoch to the next; the same seed gives the same orders). ``seed=None`` draws one
        now. Files are shuffled by row group (block order), as Ray's
        ``randomize_block_order``; add ``local_shuffle_buffer_size`` to mix rows too."""
        if seed is None:
            seed = random.SystemRandom().randrange(1 << 31)
        return self._with(seed=int(seed))

    # -- in the notebook -------------------------------------------------------------
    def count(self) -> int:
        """Rows in the dataset (running ``map_batches`` functions when there are any)."""
        if not self._ops:
            return self._source.num_rows()
        return sum(B.num_rows(b) for b in self.iter_batches(batch_size=None, prefetch_batches=0))

    def schema(self):
        """Column names and types (a ``Schema``; with ``map_batches``, of the first batch)."""
        if not self._ops:
            return self._source.schema()
        from .sources import _schema_of_columns

        for b in self.iter_batches(batch_size=None, prefetch_batches=0):
            return _schema_of_columns(b)
        return self._source.schema()

    def columns(self) -> list:
        """The column names."""
        return self.schema().names

    def take_batch(self, batch_size: int = 20, *, batch_format: str = "numpy"):
        """The first ``batch_size`` rows as one batch (in the dataset's order, unshuffled)."""
        for b in self.iter_batches(batch_size=batch_size, batch_format=batch_format, prefetch_batches=0):
            return b
        return B.to_format({}, B.check_batch_format(batch_format))

    def take(self, limit: int = 20) -> list:
        """The first ``limit`` rows, as a list of dicts of column -> value."""
        batch = self.take_batch(limit) if limit > 0 else {}
        n = B.num_rows(batch) if batch else 0
        return [{k: v[i] for k, v in batch.items()} for i in range(n)]

    def to_pandas(self, limit: int | None = None):
        """Every row (or the first ``limit``) as one ``pandas.DataFrame`` (``raynb.data.write``)."""
        from .write import to_pandas

        return to_pandas(self, limit)

    def write_parquet(self, path: str, **kwargs) -> list:
        """Stream the rows, in order, to parquet files in the directory ``path``
        (``raynb.data.write.write_parquet``: one batch in memory at a time)."""
        from .write import write_parquet

        return write_parquet(self, path, **kwargs)

    def iter_batches(self, **kwargs):
        """All rows' batches in this process (one epoch, as a single rank would read them):
        the arguments of ``DataIterator.iter_batches``."""
        return DataIterator(self, 1, 0).iter_batches(**kwargs)

    def iter_torch_batches(self, **kwargs):
        """All rows as torch batches in this process (``DataIterator.iter_torch_batches``)."""
        return DataIterator(self, 1, 0).iter_torch_batches(**kwargs)

    def shard(self, world_size: int, rank: int, pad: bool = True) -> DataIterator:
        """Rank ``rank``'s part when ``world_size`` ranks read it (what ``get_dataset_shard``
        returns on the ranks)."""
        return DataIterator(self, world_size, rank, pad)

    def size_bytes(self) -> int:
        """Bytes the in-memory columns take (0 for files: they stay on disk)."""
        return self._source.nbytes

    def torch_problem(self) -> str | None:
        """Why torch cannot take a column (named), or None: checked for in-memory data
        without ``map_batches`` (a function may turn a column into numbers)."""
        from .sources import InMemorySource

        if self._ops or not isinstance(self._source, InMemorySource):
            return None
        return B.torch_unsupported(self._source.columns())

    def __repr__(self) -> str:
        kind = type(self._source).__name__.replace("Source", "")
        parts = [f"{kind}", f"num_rows={self._source.num_rows()}",
                 f"columns={self._source.schema().names}"]
        if self._seed is not None:
            parts.append(f"random_shuffle(seed={self._seed})")
        parts += [f"map_batches({op.name})" for op in self._ops]
        return f"Dataset({', '.join(parts)})"


__all__ = ["Dataset", "MapBatchesError", "register_map_batches_executor"]
