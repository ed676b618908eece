"""A dataset's lazy per-batch steps (Ray Data's ``map_batches``, ``map``, ``flat_map``,
``filter``, ``add_column``, ``drop_columns``, ``select_columns``).

Each step turns a stream of numpy batches into another (``apply``); the process that
reads the dataset runs them (see ``compute``). A step is also callable on one batch
(``step(batch, index, rank)``), which batch inference uses on its row ranges.
"""

from __future__ import annotations

import threading
import types

from . import block
from .iterator import MapBatchesError, rebatch


class UDF:
    """A user's function, or a callable class constructed once per process on first use.

    Args:
        fn: a callable, or a class whose instances are callable.
        fn_args, fn_kwargs: passed on every call after the batch / row.
        ctor_args, ctor_kwargs: the class's constructor arguments.

    Raises:
        TypeError: ``fn`` not callable; constructor arguments for a function.
    """

    def __init__(self, what: str, fn, fn_args=None, fn_kwargs=None, ctor_args=None, ctor_kwargs=None):
        if not callable(fn):
            raise TypeError(f"{what}() takes a function or a callable class, got {type(fn).__name__}")
        if not isinstance(fn, type) and (ctor_args or ctor_kwargs):
            raise TypeError(
                f"{what}(): fn_constructor_args / fn_constructor_kwargs are for a callable class "
                f"(constructed once per worker); {getattr(fn, '__name__', fn)!r} is a function"
            )
        if isinstance(fn, type) and "__call__" not in dir(fn):
            raise TypeError(f"{what}({fn.__name__}): the class needs a __call__(self, ...) method")
        self.what, self.fn = what, fn
        self.fn_args, self.fn_kwargs = tuple(fn_args or ()), dict(fn_kwargs or {})
        self.ctor_args, self.ctor_kwargs = tuple(ctor_args or ()), dict(ctor_kwargs or {})
        self._instance, self._lock = None, threading.Lock()

    @property
    def name(self) -> str:
        return getattr(self.fn, "__qualname__", None) or type(self.fn).__name__

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_instance"], state["_lock"] = None, None  # built anew where it is unpickled
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def callable(self):
        """The function, or this process's one instance of the class."""
        if not isinstance(self.fn, type):
            return self.fn
        with self._lock:
            if self._instance is None:
                self._instance = self.fn(*self.ctor_args, **self.ctor_kwargs)
        return self._instance

    def __call__(self, value):
        return self.callable()(value, *self.fn_args, **self.fn_kwargs)


class Step:
    """A per-batch step: ``__call__(batch, index, rank) -> batch``; ``apply`` maps a stream."""

    label = "step"

    def apply(self, stream, rank: int):
        for i, b in enumerate(stream):
            yield self(b, i, rank)

    def _fail(self, name: str, index: int, rank: int, e: Exception):
        return MapBatchesError(
            f"{self.label}({name}) raised on batch {index} of rank {rank}: {type(e).__name__}: {e}"
        )


class MapBatches(Step):
    """``map_batches``: ``fn(batch)`` on batches of ``batch_size`` rows (None: as read)
    in ``batch_format``."""

    label = "map_batches"

    def __init__(self, udf: UDF, batch_format: str, batch_size: int | None = None):
        self.udf, self.batch_format, self.batch_size = udf, batch_format, batch_size

    @property
    def name(self) -> str:
        return self.udf.name

    def apply(self, stream, rank: int):
        if self.batch_size is not None:
            stream = rebatch(stream, self.batch_size, False)
        yield from Step.apply(self, stream, rank)

    def __call__(self, batch: dict, index: int, rank: int) -> dict:
        what = f"map_batches({self.name}) on batch {index}"
        try:
            out = self.udf(block.to_format(batch, self.batch_format))
            if isinstance(out, types.GeneratorType):
                # Ray takes a generator function: each yielded batch is output, in order.
                parts = [block.to_numpy_batch(part, what) for part in out]
                return block.concat(parts) if parts else {}
        except Exception as e:
            raise self._fail(self.name, index, rank, e) from e
        return block.to_numpy_batch(out, what)


def from_rows(rows: list, what: str) -> dict:
    """Rows (dicts) as a numpy batch ({} for none).

    Raises:
        TypeError: a row that is not a dict (its type named).
        ValueError: rows with different columns (both sets named).
    """
    if not rows:
        return {}
    names = None
    for r in rows:
        if not isinstance(r, dict):
            raise TypeError(f"{what} returned a {type(r).__name__}; a row is a dict of column -> value")
        if names is None:
            names = list(r)
        elif r.keys() != set(names):
            raise ValueError(f"{what} returned rows of different columns: {names} and {list(r)}")
    return block.columns_from({k: [r[k] for r in rows] for k in names}, what)


class RowStep(Step):
    """``map`` (one row out per row), ``flat_map`` (a list of rows per row), ``filter``."""

    def __init__(self, label: str, udf: UDF):
        self.label, self.udf = label, udf

    @property
    def name(self) -> str:
        return self.udf.name

    def __call__(self, batch: dict, index: int, rank: int) -> dict:
        import numpy as np

        what = f"{self.label}({self.name})"
        try:
            rows = block.rows_of(batch)
            if self.label == "filter":
                keep = np.fromiter((bool(self.udf(r)) for r in rows), dtype=bool, count=len(rows))
                return block.take_rows(batch, keep)
            if self.label == "map":
                out = [self.udf(r) for r in rows]
            else:
                out = [o for r in rows for o in _as_rows(self.udf(r), what)]
        except Exception as e:
            if what in str(e):  # our own message about what the function returned
                raise
            raise self._fail(self.name, index, rank, e) from e
        return from_rows(out, what)


def _as_rows(value, what: str) -> list:
    if isinstance(value, dict):  # Ray accepts a single row from flat_map too
        return [value]
    try:
        return list(value)
    except TypeError:
        raise TypeError(
            f"{what} returned a {type(value).__name__}; flat_map's function returns a list of rows (dicts)"
        ) from None


class AddColumn(Step):
    """``add_column(col, fn)``: ``fn(batch in batch_format)`` gives the new column."""

    label = "add_column"

    def __init__(self, col: str, fn, batch_format: str):
        if not isinstance(col, str):
            raise TypeError(f"add_column(col={col!r}): a column name is a string")
        self.col, self.udf, self.batch_format = col, UDF("add_column", fn), batch_format

    @property
    def name(self) -> str:
        return self.col

    def __call__(self, batch: dict, index: int, rank: int) -> dict:
        try:
            value = self.udf(block.to_format(batch, self.batch_format))
        except Exception as e:
            raise self._fail(self.udf.name, index, rank, e) from e
        out = dict(batch)
        out[self.col] = block.as_column(value)
        return block.columns_from(out, f"add_column({self.col!r})") if out else out


class Columns(Step):
    """``drop_columns(cols)`` / ``select_columns(cols)``."""

    def __init__(self, label: str, cols):
        cols = [cols] if isinstance(cols, str) else list(cols)
        if not cols or not all(isinstance(c, str) for c in cols):
            raise ValueError(f"{label}(cols={cols!r}): give a column name or a non-empty list of them")
        if len(set(cols)) != len(cols):
            raise ValueError(f"{label}(cols={cols!r}): a column is named twice")
        self.label, self.cols = label, cols

    @property
    def name(self) -> str:
        return ", ".join(self.cols)

    def __call__(self, batch: dict, index: int, rank: int) -> dict:
        missing = [c for c in self.cols if c not in batch]
        if missing and batch:
            raise ValueError(f"{self.label}: no column {missing} (the dataset has {list(batch)})")
        if self.label == "select_columns":
            return {c: batch[c] for c in self.cols if c in batch}
        return {k: v for k, v in batch.items() if k not in self.cols}


class RenameColumns(Step):
    """``rename_columns(names)``: a dict old -> new, or a list of every new name in order."""

    label = "rename_columns"

    def __init__(self, names):
        if not isinstance(names, (dict, list)) or not names:
            raise TypeError(
                f"rename_columns({names!r}): give a dict of old -> new names, or a list of new names"
            )
        self.names = names

    @property
    def name(self) -> str:
        return repr(self.names)

    def __call__(self, batch: dict, index: int, rank: int) -> dict:
        if isinstance(self.names, list):
            if len(self.names) != len(batch):
                raise ValueError(
                    f"rename_columns: {len(self.names)} names for {len(batch)} columns {list(batch)}"
                )
            return dict(zip(self.names, batch.values()))
        missing = [c for c in self.names if c not in batch]
        if missing and batch:
            raise ValueError(f"rename_columns: no column {missing} (the dataset has {list(batch)})")
        return {self.names.get(k, k): v for k, v in batch.items()}


class RandomSample(Step):
    """``random_sample(fraction, seed=)``: each row kept with probability ``fraction``
    (drawn per batch from ``(seed, rank, batch index)``: the same again for a seed)."""

    label = "random_sample"

    def __init__(self, fraction: float, seed: int | None):
        if not 0 <= fraction <= 1:
            raise ValueError(f"random_sample(fraction={fraction!r}): give a fraction in [0, 1]")
        self.fraction, self.seed = float(fraction), seed

    @property
    def name(self) -> str:
        return str(self.fraction)

    def __call__(self, batch: dict, index: int, rank: int) -> dict:
        import numpy as np

        rng = np.random.default_rng(None if self.seed is None else [self.seed, rank, index])
        return block.take_rows(batch, rng.random(block.num_rows(batch)) < self.fraction)
