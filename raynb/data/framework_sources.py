"""Datasets of other libraries' datasets, read into memory here when called:
``from_huggingface`` (a ``datasets.Dataset``, through its Arrow table) and ``from_tf``
(a ``tf.data.Dataset``, through ``as_numpy_iterator``), as Ray's."""

from __future__ import annotations

import sys

from .dataset import Dataset


def from_huggingface(dataset, parallelism: int = -1, concurrency=None, override_num_blocks=None) -> Dataset:
    """A dataset of a Hugging Face ``datasets.Dataset`` (its rows after ``select``,
    ``shuffle``, ``train_test_split``, ...: its Arrow table with the index mapping
    applied), or of a ``datasets.IterableDataset`` (its rows, read here).

    Raises:
        TypeError: a ``DatasetDict`` (name a split: ``ds["train"]``) or another type.
    """
    from .more_sources import from_arrow
    from .read_api import from_items

    datasets = sys.modules.get("datasets")
    kind = type(dataset).__name__
    if datasets is not None and isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise TypeError(
            f"from_huggingface() takes one split, got a {kind} of {list(dataset.keys())}: "
            f"pass e.g. from_huggingface(ds[{next(iter(dataset.keys()), 'train')!r}])"
        )
    if datasets is not None and isinstance(dataset, datasets.Dataset):
        return from_arrow(dataset.with_format("arrow")[:])
    if datasets is not None and isinstance(dataset, datasets.IterableDataset):
        return from_items(list(dataset))
    raise TypeError(f"from_huggingface() takes a datasets.Dataset or datasets.IterableDataset, got {kind}")


def from_tf(dataset) -> Dataset:
    """A dataset of a ``tf.data.Dataset``'s elements, read here (Ray's ``from_tf``):
    a dict element gives its keys as columns; any other element is one row of column
    ``"item"`` (a tuple element stays one value, as in Ray).

    Raises:
        TypeError: not a ``tf.data.Dataset`` (it has no ``as_numpy_iterator``).
    """
    from .read_api import from_items

    if not hasattr(dataset, "as_numpy_iterator"):
        raise TypeError(f"from_tf() takes a tf.data.Dataset, got {type(dataset).__name__}")
    return from_items(list(dataset.as_numpy_iterator()))


__all__ = ["from_huggingface", "from_tf"]
