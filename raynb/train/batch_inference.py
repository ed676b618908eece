"""``Dataset.map_batches(fn, num_workers=N)``: batch inference over a whole dataset on
N warm workers (``ray.data.Dataset.map_batches`` with an actor pool), as one raynb run.

- The dataset is cut into numbered units of contiguous rows (``raynb.data.ranges``: row
  ranges in memory, pieces of parquet row groups on disk); each rank takes a contiguous
  run of units, so every row is read exactly once, and in-memory data is mapped from the
  node's shared copy.
- A class is constructed once per rank (``fn_constructor_kwargs``: load the model there)
  and called per batch; a function is called per batch.
- Each unit's results go to ``<run dir>/output/part-<unit>.parquet`` as they come, one
  batch (one row group) in memory at a time: written under a dot-name, renamed when
  complete. The returned Dataset reads those files lazily, in unit order, so rows keep
  the input's order.
- Every batch reports ``rows`` (done by this rank), ``rows_per_s`` and ``batches``: the
  progress pane shows them live.
"""

from __future__ import annotations

import os
import time

from ..data import block, ranges
from ..data.dataset import register_map_batches_executor
from . import session as _session
from .config import RunConfig, ScalingConfig

DEFAULT_BATCH_SIZE = 1024  # Ray Data's default for map_batches
OUTPUT_DIR = "output"


def _plan(dataset, batch_size: int | None, num_workers: int) -> list[tuple]:
    """[(unit, index of its first batch)]: units of a whole number of batches, about four
    per worker (so the ranks' shares balance), none across a row group."""
    n = dataset._source.num_rows()
    per = -(-n // max(1, 4 * num_workers))
    if batch_size:
        per = max(batch_size, -(-per // batch_size) * batch_size)
    units, plan, first = ranges.units_of(dataset, max(1, per)), [], 0
    for u in units:
        plan.append((u, first))
        first += -(-u.num_rows // batch_size) if batch_size else 1
    return plan


class _MapTask:
    """What each rank runs: its units through ``fn``, results to parquet parts."""

    def __init__(self, fn, plan: list, opts: dict):
        self.fn, self.plan, self.opts = fn, plan, opts
        self.__name__ = "map_batches"

    def __call__(self, config):
        import pyarrow.parquet as pq

        from ..cluster.worker import task_context
        from ..data.write import batch_to_table
        from .datasets import STATE_KEY

        o = self.opts
        task = _session._require("map_batches")
        dataset = task_context.state()[STATE_KEY]["input"]
        out_dir = o["output_path"] or os.path.join(task["path"], OUTPUT_DIR)
        os.makedirs(out_dir, mode=0o700, exist_ok=True)
        call = self.fn(*o["ctor_args"], **o["ctor_kwargs"]) if isinstance(self.fn, type) else self.fn
        name = getattr(self.fn, "__qualname__", None) or type(self.fn).__name__
        mine = ranges.assign([u for u, _ in self.plan], task["world_size"], task["rank"])
        first_batch = {u.index: f for u, f in self.plan}
        done = batches = 0
        t0 = time.monotonic()
        for unit in mine:
            final = os.path.join(out_dir, f"part-{unit.index:06d}.parquet")
            tmp = os.path.join(out_dir, f".part-{unit.index:06d}.{task['rank']}.tmp")
            writer = None
            try:
                for k, batch in enumerate(ranges.read_unit(dataset, unit, o["batch_size"])):
                    index, rows = first_batch[unit.index] + k, block.num_rows(batch)
                    out = call(block.to_format(batch, o["batch_format"]), *o["fn_args"], **o["fn_kwargs"])
                    out = block.to_numpy_batch(out, f"map_batches({name}) on batch {index}")
                    got = block.num_rows(out)
                    if o["preserve_order"] and got != rows:
                        raise ValueError(
                            f"map_batches({name}): batch {index} has {rows} rows but the function returned "
                            f"{got}; with preserve_order=True each output row must be its input row's "
                            "(return one row per input row, or pass preserve_order=False)"
                        )
                    if got:
                        table = batch_to_table(out)
                        writer = writer or pq.ParquetWriter(tmp, table.schema)
                        writer.write_table(table)
                    done, batches = done + rows, batches + 1
                    elapsed = max(time.monotonic() - t0, 1e-9)
                    _session.report(
                        {
                            "rows": done,
                            "rows_per_s": round(done / elapsed, 1),
                            "batches": batches,
                            "step": batches - 1,
                        }
                    )
                if writer is not None:
                    writer.close()
                    writer = None
                    os.replace(tmp, final)
            finally:
                if writer is not None:
                    writer.close()
                if os.path.exists(tmp):
                    os.unlink(tmp)
        return {"rows": done, "batches": batches} if task["rank"] == 0 else None


def _check_fn(fn, ctor_args: tuple, ctor_kwargs: dict | None) -> None:
    """``fn`` is a function, or a callable class (the only one constructor arguments are
    for). Raises TypeError naming what is wrong."""
    if not callable(fn):
        raise TypeError(f"map_batches() takes a function or a callable class, got {type(fn).__name__}")
    if not isinstance(fn, type) and (ctor_args or ctor_kwargs):
        raise TypeError(
            "fn_constructor_args / fn_constructor_kwargs are for a class (constructed once per "
            f"worker); {getattr(fn, '__name__', fn)!r} is a function"
        )
    if isinstance(fn, type) and not callable(getattr(fn, "__call__", None)):
        raise TypeError(f"map_batches({fn.__name__}): the class needs a __call__(self, batch)")


def _check_sizes(num_workers: int, batch_size: int | None) -> None:
    """Raises ValueError for a ``num_workers`` or ``batch_size`` that is no integer >= 1."""
    if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1:
        raise ValueError(f"map_batches(num_workers={num_workers!r}): give an integer >= 1")
    if batch_size is not None and (
        not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1
    ):
        raise ValueError(f"map_batches(batch_size={batch_size!r}): give an integer >= 1, or None")


def _output_dir(output_path: str | None) -> str | None:
    """``output_path`` made absolute (None stays None: the run directory's). Raises
    FileExistsError when it already holds parquet files."""
    if output_path is not None:
        output_path = os.path.abspath(os.path.expanduser(output_path))
        if os.path.isdir(output_path) and any(n.endswith(".parquet") for n in os.listdir(output_path)):
            raise FileExistsError(
                f"map_batches(output_path={output_path!r}) already holds parquet files; give a new directory"
            )
    return output_path


def _read_output(out_dir: str, fn, dataset):
    """The run's parquet files in ``out_dir`` as a lazy Dataset. Raises ValueError when
    ``fn`` returned no rows at all (nothing was written)."""
    from ..data import read_parquet

    parts = [n for n in os.listdir(out_dir) if n.endswith(".parquet")] if os.path.isdir(out_dir) else []
    if not parts:
        raise ValueError(
            f"map_batches({getattr(fn, '__qualname__', fn)!r}) returned no rows for any batch "
            f"of the {dataset._source.num_rows()} rows; nothing was written to {out_dir}"
        )
    return read_parquet(out_dir)


def map_batches_on_workers(
    dataset,
    fn,
    *,
    batch_format: str = "numpy",
    num_workers: int = 1,
    fn_kwargs: dict | None = None,
    batch_size: int | None = DEFAULT_BATCH_SIZE,
    fn_args: tuple = (),
    fn_constructor_args: tuple = (),
    fn_constructor_kwargs: dict | None = None,
    use_gpu: bool = False,
    preserve_order: bool = False,
    output_path: str | None = None,
    run_config: RunConfig | None = None,
):
    """Run ``fn`` over every batch of ``dataset`` on ``num_workers`` warm ranks (what
    ``Dataset.map_batches(fn, num_workers=N, ...)`` calls).

    Args:
        fn: ``fn(batch, *fn_args, **fn_kwargs) -> batch``, or a class: constructed once per
            rank as ``cls(*fn_constructor_args, **fn_constructor_kwargs)``, its instance
            called per batch. A batch is a dict of numpy arrays or a DataFrame
            (``batch_format``); it returns either (or a pyarrow Table).
        batch_size (int | None): rows per batch (Ray's default 1024); None: one batch per unit.
        num_workers (int): ranks, >= 1 (each takes a contiguous share of the rows).
        use_gpu (bool): one GPU per rank (``raynb.train.torch.get_device()`` inside ``fn``).
        preserve_order (bool): require one output row per input row (a batch that changes
            its count fails the run, naming the batch and both counts). Output rows always
            come back in the input's order, by unit.
        output_path (str | None): the directory for the result's parquet files (on a file
            system every node and this process see); None: ``<run dir>/output``.
        run_config (RunConfig | None): the run's name, storage path and ``verbose``.

    The dataset's lazy ``map_batches`` steps run first, on the ranks; a ``random_shuffle``
    is not applied (inference reads the rows in their stored order).

    Returns:
        raynb.data.Dataset: the results, read lazily from the parquet files (``take``,
        ``to_pandas``, ``iter_batches``, ``write_parquet``).

    Raises:
        TypeError: ``fn`` not callable, or constructor arguments for a function.
        ValueError: ``num_workers`` or ``batch_size`` not a positive integer.
        raynb.RunError: ``fn`` raised on a rank, or changed a batch's row count with
            ``preserve_order=True`` (the message names the batch index and both counts).
    """
    from .datasets import with_datasets
    from .fit_run import execute_run

    _check_fn(fn, fn_constructor_args, fn_constructor_kwargs)
    _check_sizes(num_workers, batch_size)
    output_path = _output_dir(output_path)
    opts = {
        "batch_size": batch_size,
        "batch_format": batch_format,
        "preserve_order": bool(preserve_order),
        "fn_args": tuple(fn_args),
        "fn_kwargs": dict(fn_kwargs or {}),
        "ctor_args": tuple(fn_constructor_args),
        "ctor_kwargs": dict(fn_constructor_kwargs or {}),
        "output_path": output_path,
    }
    task = with_datasets(_MapTask(fn, _plan(dataset, batch_size, num_workers), opts), {"input": dataset})
    result, _ = execute_run(
        task,
        None,
        ScalingConfig(num_workers=num_workers, use_gpu=use_gpu),
        run_config or RunConfig(),
        name_prefix="MapBatches",
    )
    return _read_output(output_path or os.path.join(result.path, OUTPUT_DIR), fn, dataset)


register_map_batches_executor(map_batches_on_workers)
