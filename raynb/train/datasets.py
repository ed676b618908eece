"""Datasets of a run: ``TorchTrainer(datasets={...})`` and ``get_dataset_shard(name)``.

The trainer's function travels wrapped in :class:`WithDatasets`; pickling it for the
run puts in-memory datasets once per node into shared memory (``client.bulk``). On a
rank, the wrapper makes the datasets known to ``get_dataset_shard`` for the call.
"""
from __future__ import annotations

from ..cluster.worker import task_context
from ..cluster.worker.remote_error import hide_from_tracebacks
from ..data import DataIterator, Dataset
from ..data.ray_source import RayPendingSource, is_ray_dataset
from . import session as _session

STATE_KEY = "datasets"


def check_datasets(datasets) -> dict:
    """``datasets`` as a dict of name -> Dataset, checked before anything ships.

    Raises:
        TypeError: not a dict, a name that is not a string, or a value that is not a
            ``raynb.data.Dataset`` (named).
        ValueError: an in-memory column torch cannot take (dataset and column named).
    """
    if datasets is None:
        return {}
    if not isinstance(datasets, dict):
        raise TypeError(f"datasets must be a dict of name -> raynb.data.Dataset, got {type(datasets).__name__}")
    datasets = dict(datasets)
    for name, ds in datasets.items():
        if not isinstance(name, str):
            raise TypeError(f"datasets: names must be strings, got {name!r}")
        if is_ray_dataset(ds):  # split for the ranks at fit() (data/ray_source.py)
            ds = datasets[name] = Dataset(RayPendingSource(ds))
        if not isinstance(ds, Dataset):
            raise TypeError(f"datasets[{name!r}] is a {type(ds).__name__}; make a raynb.data.Dataset with "
                            "raynb.data.from_numpy / from_pandas / from_torch / read_parquet / read_csv, "
                            "or pass a ray.data.Dataset")
        problem = ds.torch_problem()
        if problem:
            raise ValueError(f"datasets[{name!r}]: {problem}")
    return datasets


class WithDatasets:
    """The training function with its datasets (what ``TorchTrainer.fit()`` ships).
    ``__wrapped__`` gives the worker ``fn``'s signature."""

    def __init__(self, fn, datasets: dict, unsplit: list | None = None):
        self.__wrapped__ = fn
        self.datasets = datasets
        self.unsplit = list(unsplit or ())   # DataConfig(datasets_to_split=...): read whole

    @hide_from_tracebacks  # the rank's traceback starts at the user's code
    def __call__(self, *args):
        task_context.state()[STATE_KEY] = self.datasets
        task_context.state()["datasets_unsplit"] = getattr(self, "unsplit", ())
        return self.__wrapped__(*args)


def with_datasets(fn, datasets: dict | None, unsplit: list | None = None):
    """``fn`` wrapped with ``datasets`` (``fn`` itself when there are none); ``unsplit``
    names those each rank reads whole (``DataConfig``)."""
    return WithDatasets(fn, datasets, unsplit) if datasets else fn


def get_dataset_shard(name: str, *, pad: bool = True) -> DataIterator:
    """This rank's part of the dataset ``name`` (``ray.train.get_dataset_shard``).

    A dataset ``DataConfig(datasets_to_split=[...])`` leaves out is read whole by every
    rank. Otherwise rows are disjoint between ranks and equal in number on every rank: ``ceil(n / world)``
    with the order padded by wrapping (as ``DistributedSampler``), or ``n // world`` with
    ``pad=False`` (the tail dropped). In-memory data is mapped from this node's shared
    copy (no copy per rank); files are read by this rank only (its row groups).

    Returns:
        a ``raynb.data.DataIterator``: ``iter_torch_batches(...)``, ``iter_batches(...)``,
        ``count()`` / ``len()``, ``set_epoch(e)``.

    Raises:
        KeyError: no dataset of that name was passed (the message lists those that were).
        RuntimeError: called outside a training function.
    """
    task = _session._require("get_dataset_shard")
    datasets = task_context.state().get(STATE_KEY) or {}
    if name not in datasets:
        given = ", ".join(repr(n) for n in datasets) or "none"
        raise KeyError(f"get_dataset_shard({name!r}): no dataset of that name; the run was given {given} "
                       "(TorchTrainer(datasets={...}) or %%ray_train --data name=expr)")
    if name in (task_context.state().get("datasets_unsplit") or ()):   # DataConfig: not split
        return datasets[name].shard(1, 0, pad)
    return datasets[name].shard(task["world_size"], task["rank"], pad)
