"""One Ray session for the tests that compare ``raynb.data`` with Ray Data 2.60 on the same
input: started in a private temporary folder (short: Ray's socket paths must stay under 108
bytes), with a second try where a loaded machine missed Ray's fixed 30 s raylet start wait,
and shut down and removed after."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

import numpy as np


@contextlib.contextmanager
def ray_data_session(prefix: str, sort_shuffle: bool = False):
    """Yields the ``ray.data`` module of a fresh one-CPU Ray session. ``sort_shuffle``: Ray's
    task-based sort shuffle (its default starts an aggregator process for every sort and
    groupby; the task-based one reuses the worker and gives the same rows)."""
    import ray

    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        for attempt in (1, 2):
            try:
                ray.init(
                    num_cpus=1,
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level="ERROR",
                    _temp_dir=os.path.join(tmp, f"ray{attempt}"),
                )
                break
            except Exception:  # noqa: BLE001 - Ray's own "timed out during startup"
                ray.shutdown()
                if attempt == 2:
                    raise
        import ray.data

        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        if sort_shuffle:
            ctx.shuffle_strategy = ray.data.context.ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
        yield ray.data
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def norm(value):
    """Rows / batches as plain Python (numpy arrays and scalars as lists and numbers)."""
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [norm(v) for v in value]
    if isinstance(value, np.ndarray):
        return [norm(v) for v in value.tolist()] if value.dtype.hasobject else value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
