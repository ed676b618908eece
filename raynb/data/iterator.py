"""A rank's part of a dataset (``raynb.train.get_dataset_shard``), as Ray's ``DataIterator``.

Each call of ``iter_batches`` / ``iter_torch_batches`` is one epoch: the epoch number
(``set_epoch``, else 0 and one more each call) picks the global shuffle's order. Batches
are made by a background thread that keeps ``prefetch_batches`` ready (reading files,
gathering shuffled rows, running ``map_batches``) while the training step runs.
"""

from __future__ import annotations

import queue
import threading
import warnings

from . import block

_END = object()


class MapBatchesError(RuntimeError):
    """A ``map_batches`` function raised; the message names the function, the batch's
    index in this rank's epoch and the rank. The function's own exception is the cause
    (``__cause__``), with its traceback."""


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


def prefetched(make, depth: int):
    """Iterate the generator ``make()`` in a daemon thread, ``depth`` items ahead (in this
    thread when ``depth`` is 0). Its exception is raised here; stopping early ends it."""
    if depth <= 0:
        yield from make()
        return
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run():
        try:
            for item in make():
                if not put(item):
                    return
            put(_END)
        except BaseException as e:  # noqa: BLE001 - raised again in the consumer
            put(_Failed(e))

    t = threading.Thread(target=run, name="raynb-data-prefetch", daemon=True)
    t.start()
    from ..cluster.worker import task_context

    if task_context.current() is not None:  # a loop left unfinished: the thread ends with the task
        task_context.at_end(lambda status: stop.set())
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.exc
            yield item
    finally:
        stop.set()


def rebatch(stream, batch_size: int | None, drop_last: bool):
    """Numpy batches of exactly ``batch_size`` rows from a stream of any sizes (the last
    one shorter, or dropped with ``drop_last``); ``batch_size=None`` passes them on."""
    if batch_size is None:
        yield from (b for b in stream if block.num_rows(b))
        return
    held, have = [], 0
    for b in stream:
        n = block.num_rows(b)
        if not n:
            continue
        if not have and n == batch_size:
            yield b
            continue
        held.append(b)
        have += n
        while have >= batch_size:
            joined = block.concat(held)
            yield block.take_rows(joined, slice(0, batch_size))
            rest = block.take_rows(joined, slice(batch_size, have))
            have -= batch_size
            held = [rest] if have else []
    if have and not drop_last:
        yield block.concat(held)


def local_shuffle(stream, buffer_rows: int, rng):
    """Rows mixed within windows of at least ``buffer_rows`` (``local_shuffle_buffer_size``;
    a window is whole blocks of the stream, as Ray's buffer is a minimum)."""
    held, have = [], 0
    for b in stream:
        held.append(b)
        have += block.num_rows(b)
        if have >= buffer_rows:
            joined = block.concat(held)
            yield block.take_rows(joined, rng.permutation(have))
            held, have = [], 0
    if have:
        joined = block.concat(held)
        yield block.take_rows(joined, rng.permutation(have))


class DataIterator:
    """This rank's shard of a dataset: disjoint from the other ranks', the same number of
    rows on every rank (see ``raynb.data.sharding``: padded by wrapping, or the tail
    dropped with ``pad=False``).

    Args:
        dataset (Dataset): the whole dataset, as shipped.
        world_size (int), rank (int): the run's ranks and this one.
        pad (bool): pad to equal counts by wrapping (True) or drop the remainder.
    """

    def __init__(self, dataset, world_size: int, rank: int, pad: bool = True):
        self._ds, self.world_size, self.rank, self.pad = dataset, world_size, rank, pad
        self._epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads (the global shuffle's order; a resumed run
        sets it from its checkpoint to read what it would have)."""
        self._epoch = int(epoch)

    @property
    def epoch(self) -> int:
        """The epoch the next iteration reads."""
        return self._epoch

    def count(self) -> int:
        """Rows of this shard per epoch (before ``map_batches``)."""
        from .sharding import rows_per_rank

        return rows_per_rank(self._ds._source.num_rows(), self.world_size, self.pad)

    def __len__(self) -> int:
        return self.count()

    def _batches(
        self, batch_size, drop_last, local_shuffle_buffer_size, local_shuffle_seed, prefetch_batches
    ):
        import numpy as np

        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size={batch_size!r}: give a positive number of rows, or None")
        epoch, self._epoch = self._epoch, self._epoch + 1
        ds, rank = self._ds, self.rank
        chunk = batch_size or 4096

        def make():
            stream = ds._source.rank_stream(self.world_size, rank, ds._seed, epoch, self.pad, chunk)
            if local_shuffle_buffer_size:
                seed = [
                    local_shuffle_seed if local_shuffle_seed is not None else (ds._seed or 0),
                    epoch,
                    rank,
                ]
                stream = local_shuffle(stream, int(local_shuffle_buffer_size), np.random.default_rng(seed))
            if ds._ops:  # the steps see the batches as read; the reader gets its batch_size
                stream = ds._apply_stream(stream, rank)
            yield from rebatch(stream, batch_size, drop_last)

        return prefetched(make, int(prefetch_batches or 0))

    def to_tf(self, feature_columns, label_columns=None, **kwargs):
        """This shard as a ``tf.data.Dataset`` of ``(features, labels)`` (Ray's
        ``DataIterator.to_tf``; see ``raynb.data.tf_dataset.to_tf``)."""
        from .tf_dataset import to_tf

        return to_tf(self, feature_columns, label_columns, **kwargs)

    def iter_batches(
        self,
        *,
        batch_size: int | None = 256,
        batch_format: str | None = "default",
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
        prefetch_batches: int = 1,
    ):
        """Batches of this shard for one epoch (``DataIterator.iter_batches``).

        Args:
            batch_size (int | None): rows per batch; None gives the blocks as read.
            batch_format ("default" | "numpy" | "pandas" | "pyarrow"): a dict of numpy
                arrays, a DataFrame or a pyarrow Table.
            drop_last (bool): drop a last batch shorter than ``batch_size``.
            local_shuffle_buffer_size (int | None): mix rows within windows of this many.
            local_shuffle_seed (int | None): that mixing's seed (the dataset's by default).
            prefetch_batches (int): batches a background thread keeps ready (0: none).

        Raises:
            MapBatchesError: a ``map_batches`` function raised (its batch index named).
        """
        fmt = block.check_batch_format(batch_format)
        for b in self._batches(
            batch_size, drop_last, local_shuffle_buffer_size, local_shuffle_seed, prefetch_batches
        ):
            yield block.to_format(b, fmt)

    def iter_torch_batches(
        self,
        *,
        batch_size: int | None = 256,
        dtypes=None,
        device=None,
        collate_fn=None,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
        prefetch_batches: int = 1,
        pin_memory: bool = False,
    ):
        """Batches of this shard for one epoch as dicts of ``torch.Tensor``
        (``DataIterator.iter_torch_batches``). Unshuffled in-memory rows arrive as
        ``torch.from_numpy`` views of the node's shared copy (no copy; they are marked
        read-only for numpy, and an in-place write changes only this rank's pages).

        Args:
            batch_size, drop_last, local_shuffle_buffer_size, local_shuffle_seed,
                prefetch_batches: as :meth:`iter_batches`.
            dtypes (torch.dtype | dict[str, torch.dtype] | None): cast all columns, or
                the named ones.
            device (str | torch.device | None): where tensors go; None or "auto" is this rank's
                device (its GPU in a ``use_gpu`` run, else the CPU).
            collate_fn (callable | None): ``collate_fn(numpy batch)`` replaces the
                conversion (Ray's argument).

        Raises:
            MapBatchesError: a ``map_batches`` function raised (its batch index named).
            ValueError: a column torch cannot take (named).
        """
        import torch

        dev = torch.device(device) if device not in (None, "auto") else _rank_device(torch)
        for b in self._batches(
            batch_size, drop_last, local_shuffle_buffer_size, local_shuffle_seed, prefetch_batches
        ):
            if collate_fn is not None:
                yield collate_fn(b)
                continue
            yield {k: _to_tensor(torch, k, v, dtypes, dev) for k, v in b.items()}

    def iter_rows(self, *, prefetch_batches: int = 1):
        """This shard's rows for one epoch, each a dict of column -> value."""
        for b in self._batches(None, False, None, None, prefetch_batches):
            yield from block.rows_of(b)

    def _collect(self) -> dict:
        """This shard's rows of one epoch as one numpy batch ({} for none)."""
        parts = list(self._batches(None, False, None, None, 0))
        return block.concat(parts) if parts else {}

    def materialize(self):
        """This shard's rows of one epoch, computed now and held in memory (a
        ``MaterializedDataset``: ``count``, ``take``, ``iter_batches`` ... on it read
        them again without the steps)."""
        return self._ds._materialized(self._collect())

    def to_pandas(self, limit: int | None = None):
        """This shard's rows of one epoch as one ``pandas.DataFrame`` (raynb's addition:
        Ray's shard has no ``to_pandas``; ``materialize().to_pandas()`` is the same).

        Raises:
            ValueError: more rows than ``limit``.
        """
        return self.materialize().to_pandas(limit)

    def __getattr__(self, name: str):
        from .not_served import not_served

        raise not_served("DataIterator", name)

    def __repr__(self) -> str:
        return (
            f"DataIterator(rank={self.rank}, world_size={self.world_size}, rows={self.count()}, "
            f"epoch={self._epoch}, dataset={self._ds!r})"
        )


def _to_tensor(torch, name, a, dtypes, device):
    if a.dtype.kind not in "biufc":
        raise ValueError(block.torch_unsupported({name: a}))
    if not a.flags.writeable:
        _ignore_not_writable()
    t = torch.from_numpy(a)
    dtype = dtypes.get(name) if isinstance(dtypes, dict) else dtypes
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    if device.type != "cpu":
        t = t.to(device, non_blocking=True)
    return t


# torch's warning for a read-only array: a shard's batches are shared copies, by design.
_NOT_WRITABLE = ("ignore", "The given NumPy array is not writable")


def _ignore_not_writable() -> None:
    """Filter torch's not-writable warning, once per process. Not by ``catch_warnings``
    around each conversion: every change of the filters clears Python's once-per-location
    registries, so a warning in the user's loop printed at every batch."""
    for f in warnings.filters:
        if f[0] == _NOT_WRITABLE[0] and f[1] is not None and f[1].pattern == _NOT_WRITABLE[1]:
            return
    warnings.filterwarnings(_NOT_WRITABLE[0], message=_NOT_WRITABLE[1], category=UserWarning)


def _rank_device(torch):
    from ..cluster.worker import task_context

    task = task_context.current() or {}
    if task.get("use_gpu") and task.get("gpu_id") is not None:
        return torch.device("cuda", task["gpu_id"])
    return torch.device("cpu")
