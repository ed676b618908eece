"""``Dataset``: rows from notebook arrays or files, with Ray Data's transformations.

A dataset is a source (``sources``), a list of lazy steps (``transforms``: ``map``,
``map_batches``, ``filter``, ...) and an optional global shuffle seed. The steps run in
the process that reads the rows: each rank as it iterates (inside the prefetch thread,
so they overlap the training step), or the notebook (``take``, ``show``, ... in
``consume``). Operations that need every row (``sort``, ``groupby``, ``split``, ...;
``global_ops``) compute their result when called.

Other modules add operations through :func:`register_map_batches_executor`: raynb's
``map_batches(..., num_workers=N)`` (a pool of warm workers running the function over the
whole dataset now: batch inference) is reserved for that executor; without one
registered it raises ``NotImplementedError``.
"""

from __future__ import annotations

import random
from typing import Callable

from . import block, transforms
from .compute import check_compute, check_remote_args, note_once
from .consume import ConsumeMixin
from .global_ops import GlobalOpsMixin
from .iterator import DataIterator, MapBatchesError
from .not_served import not_served

_executors: dict[str, Callable] = {}


def register_map_batches_executor(impl: Callable, name: str = "batch_inference") -> None:
    """Install what ``Dataset.map_batches(fn, num_workers=N, ...)`` calls:
    ``impl(dataset, fn, batch_format=..., num_workers=N, **kwargs)`` returning a Dataset
    (e.g. the predictions, computed on N ranks). One executor per ``name``; the latest
    registered one is used."""
    _executors[name] = impl


class Dataset(ConsumeMixin, GlobalOpsMixin):
    """Rows to train on (after ``ray.data.Dataset``). Make one with ``raynb.data.from_items``,
    ``from_numpy``, ``from_pandas``, ``range``, ``read_parquet``, ``read_csv``, ``read_json``;
    pass it as ``TorchTrainer(datasets={"train": ds})`` and read
    ``raynb.train.get_dataset_shard("train")`` on each rank. Transformations return a new
    Dataset; the original is unchanged. Per-row and per-batch ones (``map``,
    ``map_batches``, ``filter``, ...) are lazy; ones that need every row (``sort``,
    ``groupby``, ``split``, ``limit``, ...) compute their result in this process
    (``raynb.data.global_ops``). Ray's methods raynb does not serve raise AttributeError.
    """

    def __init__(self, source, ops: tuple = (), seed: int | None = None):
        self._source, self._ops, self._seed = source, tuple(ops), seed

    def _with(self, **changes) -> "Dataset":
        parts = {"source": self._source, "ops": self._ops, "seed": self._seed, **changes}
        return Dataset(parts["source"], parts["ops"], parts["seed"])

    def _materialized(self, columns: dict) -> "MaterializedDataset":
        """A ``MaterializedDataset`` of ``columns`` (a numpy batch; {}: no rows, this
        dataset's columns when it knows them without reading)."""
        import numpy as np

        from .sources import InMemorySource

        if not columns:
            names = self._source.schema().names if not self._ops else []
            columns = {n: np.empty(0, dtype=object) for n in names} or {"id": np.empty(0, dtype=np.int64)}
        return MaterializedDataset(InMemorySource(columns))

    def _add(self, step) -> "Dataset":
        return self._with(ops=self._ops + (step,))

    def _apply_ops(self, batch: dict, index: int, rank: int) -> dict:
        """The steps on one batch (batch inference's row ranges: no rebatching)."""
        for op in self._ops:
            batch = op(batch, index, rank)
        return batch

    def _apply_stream(self, stream, rank: int):
        """The steps on this reader's stream of numpy batches."""
        for op in self._ops:
            stream = op.apply(stream, rank)
        return stream

    # -- transformations -------------------------------------------------------------
    def map_batches(
        self,
        fn: Callable,
        *,
        batch_size: int | str | None = None,
        compute=None,
        batch_format: str | None = "default",
        fn_args=None,
        fn_kwargs: dict | None = None,
        fn_constructor_args=None,
        fn_constructor_kwargs: dict | None = None,
        concurrency=None,
        num_workers: int | None = None,
        **kwargs,
    ) -> "Dataset":
        """``fn(batch) -> batch`` applied lazily to every batch (``ray.data.Dataset.map_batches``).

        Args:
            fn: a function, or a callable class (constructed once per reading process with
                ``fn_constructor_args`` / ``fn_constructor_kwargs``, called per batch).
                It takes a batch in ``batch_format`` and returns a dict of arrays, a
                DataFrame or a pyarrow Table (rows may change in number).
            batch_size (int | None | "auto"): rows per call (None, "auto": the batches as read).
            batch_format ("default" | "numpy" | "pandas" | "pyarrow"): what ``fn`` gets.
            fn_args, fn_kwargs: passed to ``fn`` after the batch.
            compute (ActorPoolStrategy | TaskPoolStrategy | None), concurrency (int | tuple):
                checked as Ray checks them; see ``raynb.data.compute`` for what they mean here.
            num_workers (int | None): raynb's eager form: run ``fn`` over the whole dataset
                now on that many warm workers (batch inference; ``raynb.train.batch_inference``).
            **kwargs: Ray's resource arguments (``num_cpus``, ``num_gpus``, ...): no effect.

        Raises:
            ValueError: an unknown ``batch_format``; a bad ``batch_size``; a class with a task pool.
            TypeError: ``fn`` not callable; constructor arguments for a function; an unknown argument.
            NotImplementedError: ``num_workers`` given and no executor is registered.
        """
        fmt = block.check_batch_format(batch_format)
        if num_workers is not None:
            return self._map_batches_on_workers(
                fn,
                fmt,
                batch_size,
                fn_args,
                fn_kwargs,
                fn_constructor_args,
                fn_constructor_kwargs,
                num_workers,
                kwargs,
            )
        batch_size = None if batch_size == "auto" else batch_size
        if batch_size is not None and (
            not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1
        ):
            raise ValueError(f"map_batches(batch_size={batch_size!r}): give an integer >= 1, None or 'auto'")
        udf = self._udf(
            "map_batches",
            fn,
            compute,
            concurrency,
            kwargs,
            fn_args,
            fn_kwargs,
            fn_constructor_args,
            fn_constructor_kwargs,
        )
        return self._add(transforms.MapBatches(udf, fmt, batch_size))

    def _map_batches_on_workers(
        self, fn, fmt, batch_size, fn_args, fn_kwargs, ctor_args, ctor_kwargs, num_workers, kwargs
    ) -> "Dataset":
        impl = _executors.get("batch_inference")
        if impl is None:
            raise NotImplementedError(
                "map_batches(num_workers=...) runs the function over the whole dataset on a pool "
                "of workers (batch inference); no such executor is installed in this raynb. Leave "
                "num_workers out to apply fn lazily on each rank's batches"
            )
        extra = {
            "fn_args": tuple(fn_args or ()),
            "fn_constructor_args": tuple(ctor_args or ()),
            "fn_constructor_kwargs": ctor_kwargs,
            **kwargs,
        }
        if batch_size is not None:
            extra["batch_size"] = batch_size
        return impl(self, fn, batch_format=fmt, num_workers=num_workers, fn_kwargs=fn_kwargs, **extra)

    @staticmethod
    def _udf(
        what, fn, compute, concurrency, kwargs, fn_args=None, fn_kwargs=None, ctor_args=None, ctor_kwargs=None
    ) -> transforms.UDF:
        check_compute(what, fn, compute, concurrency)
        check_remote_args(what, kwargs)
        if compute is not None or concurrency is not None:
            note_once(
                f"raynb.data: {what}(compute= / concurrency=): the function runs in each process that "
                "reads the dataset (the notebook, or each rank of a run), a class constructed once "
                "there; map_batches(fn, num_workers=N) runs it over the whole dataset on N workers"
            )
        return transforms.UDF(what, fn, fn_args, fn_kwargs, ctor_args, ctor_kwargs)

    def map(
        self,
        fn: Callable,
        *,
        compute=None,
        fn_args=None,
        fn_kwargs: dict | None = None,
        fn_constructor_args=None,
        fn_constructor_kwargs: dict | None = None,
        concurrency=None,
        **kwargs,
    ) -> "Dataset":
        """``fn(row) -> row`` on every row, lazily (``ray.data.Dataset.map``); a row is a
        dict of column -> value. Arguments as :meth:`map_batches`."""
        udf = self._udf(
            "map",
            fn,
            compute,
            concurrency,
            kwargs,
            fn_args,
            fn_kwargs,
            fn_constructor_args,
            fn_constructor_kwargs,
        )
        return self._add(transforms.RowStep("map", udf))

    def flat_map(
        self,
        fn: Callable,
        *,
        compute=None,
        fn_args=None,
        fn_kwargs: dict | None = None,
        fn_constructor_args=None,
        fn_constructor_kwargs: dict | None = None,
        concurrency=None,
        **kwargs,
    ) -> "Dataset":
        """``fn(row) -> list of rows`` on every row, lazily (``ray.data.Dataset.flat_map``)."""
        udf = self._udf(
            "flat_map",
            fn,
            compute,
            concurrency,
            kwargs,
            fn_args,
            fn_kwargs,
            fn_constructor_args,
            fn_constructor_kwargs,
        )
        return self._add(transforms.RowStep("flat_map", udf))

    def filter(
        self,
        fn: Callable | None = None,
        expr=None,
        *,
        compute=None,
        fn_args=None,
        fn_kwargs: dict | None = None,
        fn_constructor_args=None,
        fn_constructor_kwargs: dict | None = None,
        concurrency=None,
        **kwargs,
    ) -> "Dataset":
        """The rows for which ``fn(row)`` is true, lazily (``ray.data.Dataset.filter``).

        Raises:
            TypeError: no ``fn`` nor ``expr``; ``expr`` not a string.
            ValueError: ``expr`` not a Python expression.

        ``expr="id > 5"``: Ray's string predicate, evaluated per batch (``expr_filter``).
        """
        if expr is not None:
            from .expr_filter import ExprFilter

            return self.map_batches(ExprFilter(expr), batch_format="numpy")
        if fn is None:
            raise TypeError("filter() needs fn, a function of a row returning True to keep it")
        udf = self._udf(
            "filter",
            fn,
            compute,
            concurrency,
            kwargs,
            fn_args,
            fn_kwargs,
            fn_constructor_args,
            fn_constructor_kwargs,
        )
        return self._add(transforms.RowStep("filter", udf))

    def add_column(
        self,
        col: str,
        fn: Callable,
        *,
        batch_format: str | None = "pandas",
        compute=None,
        concurrency=None,
        **kwargs,
    ) -> "Dataset":
        """A new column ``col`` (or a replaced one): ``fn(batch)`` in ``batch_format``
        ("pandas" by default, as Ray) returns its values for the batch's rows."""
        fmt = block.check_batch_format(batch_format)
        self._udf("add_column", fn, compute, concurrency, kwargs)
        return self._add(transforms.AddColumn(col, fn, fmt))

    def drop_columns(self, cols, *, compute=None, concurrency=None, **kwargs) -> "Dataset":
        """The dataset without the columns ``cols`` (a name or a list).

        Raises:
            ValueError: no names, or a name twice; reading: a column the dataset lacks.
        """
        check_remote_args("drop_columns", kwargs)
        return self._add(transforms.Columns("drop_columns", cols))

    def select_columns(self, cols, *, compute=None, concurrency=None, **kwargs) -> "Dataset":
        """Only the columns ``cols`` (a name or a list), in that order.

        Raises:
            ValueError: no names, or a name twice; reading: a column the dataset lacks.
        """
        check_remote_args("select_columns", kwargs)
        return self._add(transforms.Columns("select_columns", cols))

    def rename_columns(self, names, *, concurrency=None, **kwargs) -> "Dataset":
        """The columns renamed: ``names`` a dict old -> new, or a list of every new name.

        Raises:
            TypeError: neither a dict nor a list. Reading: a column the dataset lacks.
        """
        check_remote_args("rename_columns", kwargs)
        return self._add(transforms.RenameColumns(names))

    def random_sample(self, fraction: float, *, seed: int | None = None) -> "Dataset":
        """About ``fraction`` of the rows, each kept with that probability (lazily).

        Raises:
            ValueError: ``fraction`` outside [0, 1].
        """
        return self._add(transforms.RandomSample(fraction, seed))

    def random_shuffle(
        self, *, seed: int | None = None, num_blocks: int | None = None, **ray_remote_args
    ) -> "Dataset":
        """Shuffle all rows globally, anew each epoch: epoch ``e`` reads the permutation
        drawn from ``(seed, e)``, the same on every rank (rows move between ranks from one
        epoch to the next; the same seed gives the same orders). ``seed=None`` draws one
        now. Files are shuffled by row group (block order), as Ray's
        ``randomize_block_order``; add ``local_shuffle_buffer_size`` to mix rows too.
        Steps added before the shuffle run after it (they are per row or per batch).

        Raises:
            TypeError: a ``seed`` that is not an int; an unknown argument.
        """
        check_remote_args("random_shuffle", ray_remote_args)
        if seed is None:
            seed = random.SystemRandom().randrange(1 << 31)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"random_shuffle(seed={seed!r}): give an int, or None for a random one")
        return self._with(seed=int(seed))

    def randomize_block_order(self, *, seed: int | None = None) -> "Dataset":
        """Ray's shuffle of block order: the same dataset here (rows are not held in
        blocks; each rank reads its row range), said once on stderr. Use
        ``random_shuffle()`` or ``iter_batches(local_shuffle_buffer_size=)`` to shuffle rows."""
        note_once(
            "raynb.data: randomize_block_order() has no effect: rows are not held in blocks "
            "(random_shuffle() or local_shuffle_buffer_size= shuffle rows)"
        )
        return self

    def streaming_split(self, n: int, *, equal: bool = False, locality_hints=None) -> list:
        """``n`` iterators over disjoint parts of the rows (Ray's ``streaming_split``, for
        ``n`` consumers): with ``equal``, each the same size (the few rows left over are
        dropped, as Ray's). Read in this process; in a run use ``get_dataset_shard``.

        Raises:
            ValueError: ``n`` below 1.
        """
        if n < 1:
            raise ValueError(f"streaming_split({n!r}): n must be >= 1")
        return [part.iterator() for part in self.split(n, equal=equal)]

    def write_datasink(self, datasink, *, ray_remote_args=None, concurrency=None) -> None:
        """Write every row to a custom ``Datasink`` (Ray's ``write_datasink``), in this
        process; see ``raynb.data.datasink.write_datasink``.

        Raises:
            TypeError: not a Datasink. Whatever the sink raised (after ``on_write_failed``).
        """
        from .datasink import write_datasink

        write_datasink(self, datasink, ray_remote_args=ray_remote_args, concurrency=concurrency)

    def iterator(self) -> DataIterator:
        """A ``DataIterator`` over every row (Ray's ``Dataset.iterator``)."""
        return DataIterator(self, 1, 0, False)

    def shard(self, world_size: int, rank: int, pad: bool = True) -> DataIterator:
        """Rank ``rank``'s part when ``world_size`` ranks read it (what ``get_dataset_shard``
        returns on the ranks)."""
        return DataIterator(self, world_size, rank, pad)

    def size_bytes(self) -> int:
        """Bytes the in-memory columns take (0 for files: they stay on disk)."""
        return self._source.nbytes

    def torch_problem(self) -> str | None:
        """Why torch cannot take a column (named), or None: checked for in-memory data
        without transforms (a function may turn a column into numbers). Object and string
        columns pass (a rank reads them with ``iter_batches``; ``iter_torch_batches``
        names them)."""
        from .sources import InMemorySource

        if self._ops or not isinstance(self._source, InMemorySource):
            return None
        return block.torch_unsupported(self._source.columns(), objects=False)

    def __repr__(self) -> str:
        kind = type(self._source).__name__.replace("Source", "")
        parts = [f"{kind}", f"num_rows={self._source.num_rows()}", f"columns={self._source.schema().names}"]
        if self._seed is not None:
            parts.append(f"random_shuffle(seed={self._seed})")
        parts += [f"{op.label}({op.name})" for op in self._ops]
        return f"{type(self).__name__}({', '.join(parts)})"

    def __getattr__(self, name: str):
        raise not_served("Dataset", name)


class MaterializedDataset(Dataset):
    """A dataset whose rows are computed and held in memory (``materialize()``, ``split``,
    ``train_test_split``), as Ray's ``MaterializedDataset``."""


__all__ = ["Dataset", "MapBatchesError", "MaterializedDataset", "register_map_batches_executor"]
