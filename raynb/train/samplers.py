"""Sharding a custom sampler or batch sampler across ranks (``prepare_data_loader``).

A custom sampler carries meaning: a ``WeightedRandomSampler`` draws by weight, a
``SubsetRandomSampler`` only its subset. Replacing it by a ``DistributedSampler``
over the whole dataset (as before) drew items of zero weight. Here every rank
draws the same sequence from the user's sampler, with every random generator it
may use seeded by ``seed + epoch``, and keeps the elements ``rank, rank +
world_size, ...`` of it, padded to equal length as ``DistributedSampler`` pads:
the ranks together draw what one process would, each a different part, the same
part again for the same epoch (as Catalyst's and Lightning's
``DistributedSamplerWrapper``).
"""

from __future__ import annotations

import math
import random
import sys

from torch.utils.data import Sampler
from torch.utils.data.distributed import DistributedSampler


def _seeded_generators(sampler) -> list:
    """(object, generator) for the sampler and its inner sampler (a BatchSampler's)
    that carry a ``generator`` of their own."""
    found = []
    for obj in (sampler, getattr(sampler, "sampler", None)):
        if getattr(obj, "generator", None) is not None:
            found.append((obj, obj.generator))
    return found


def base_seed(sampler) -> int:
    """The user's seed when the sampler was given a generator, else 0 (DistributedSampler's)."""
    found = _seeded_generators(sampler)
    return int(found[0][1].initial_seed()) if found else 0


def draw(sampler, seed: int) -> list:
    """Everything ``sampler`` yields in one pass, drawn with its generators, torch's,
    Python's and NumPy's global ones seeded by ``seed``, so every rank draws the same.
    The process's own random state is left as it was."""
    import torch

    np = sys.modules.get("numpy")
    py_state, np_state = random.getstate(), np.random.get_state() if np is not None else None
    own = _seeded_generators(sampler)
    try:
        for obj, _ in own:
            obj.generator = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            random.seed(seed)
            if np is not None:
                np.random.seed(seed % 2**32)
            return list(sampler)
    finally:
        for obj, generator in own:
            obj.generator = generator
        random.setstate(py_state)
        if np is not None:
            np.random.set_state(np_state)


def shard(items: list, rank: int, world_size: int) -> list:
    """``items[rank::world_size]`` after padding ``items`` to a multiple of ``world_size``
    by repeating it from the start (every rank gets as many)."""
    pad = (-len(items)) % world_size
    if items and pad:
        items = items + (items * math.ceil(pad / len(items)))[:pad]
    return items[rank::world_size]


def _length(sampler, what: str) -> int:
    try:
        return len(sampler)
    except TypeError:
        raise ValueError(
            f"prepare_data_loader() cannot shard a custom {what} without __len__ "
            f"({type(sampler).__name__}); give it one, or shard it yourself with "
            "get_context().get_world_rank() and pass add_dist_sampler=False"
        ) from None


class DistributedSamplerWrapper(DistributedSampler):
    """This rank's share of a custom sampler's draws (a ``DistributedSampler``:
    ``set_epoch`` gives each epoch its own draws, the same on every rank).

    Args:
        sampler: the user's sampler (it must have ``__len__``).
        num_replicas (int), rank (int): the world size and this rank.
        seed (int | None): None uses the sampler's generator's seed, or 0.

    Raises:
        ValueError: the sampler has no ``__len__``.
    """

    def __init__(self, sampler, num_replicas: int, rank: int, seed: int | None = None):
        n = _length(sampler, "sampler")
        super().__init__(
            range(n),
            num_replicas=num_replicas,
            rank=rank,
            shuffle=False,
            seed=base_seed(sampler) if seed is None else seed,
        )
        self.sampler = sampler

    def __iter__(self):
        return iter(shard(draw(self.sampler, self.seed + self.epoch), self.rank, self.num_replicas))


class DistributedBatchSamplerWrapper(Sampler):
    """This rank's share of a custom batch sampler's batches: whole batches, every
    ``world_size``-th one, drawn as :class:`DistributedSamplerWrapper` draws.

    Raises:
        ValueError: the batch sampler has no ``__len__``.
    """

    def __init__(self, batch_sampler, num_replicas: int, rank: int, seed: int | None = None):
        self.batch_sampler = batch_sampler
        self.num_replicas, self.rank = num_replicas, rank
        self.seed = base_seed(batch_sampler) if seed is None else seed
        self.epoch = 0
        self.num_batches = math.ceil(_length(batch_sampler, "batch_sampler") / num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """Draw the batches of ``epoch`` next (call it before each pass, as for DistributedSampler)."""
        self.epoch = epoch

    def __iter__(self):
        return iter(shard(draw(self.batch_sampler, self.seed + self.epoch), self.rank, self.num_replicas))

    def __len__(self) -> int:
        return self.num_batches
