"""``FileShuffleConfig``: the order of a file read's files drawn from a seed (Ray's
``shuffle=FileShuffleConfig(seed=...)`` of the ``read_*`` functions)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class FileShuffleConfig:
    """Shuffle the files of a read, before they are read (Ray's ``FileShuffleConfig``).

    Attributes:
        seed (int | None): the seed of the file order; None draws one.
        reseed_after_execution (bool): Ray draws a new order for each execution; raynb
            fixes the order when the dataset is made (shuffle rows per epoch with
            ``random_shuffle()``).

    Raises:
        ValueError: a ``seed`` that is not a non-negative int.
    """

    seed: Optional[int] = None
    reseed_after_execution: bool = True

    def __post_init__(self):
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise ValueError(f"FileShuffleConfig(seed={self.seed!r}): give an int >= 0, or None")


def shuffled_files(files: list, shuffle, what: str) -> list:
    """``files`` in the order ``shuffle`` asks for: unchanged for None, a seeded
    permutation for a ``FileShuffleConfig`` (or ``"files"``: a random one).

    Raises:
        ValueError: any other ``shuffle`` value, named.
    """
    import numpy as np

    if shuffle is None:
        return list(files)
    if shuffle == "files":
        shuffle = FileShuffleConfig()
    if not isinstance(shuffle, FileShuffleConfig):
        raise ValueError(f"{what}(shuffle={shuffle!r}): give None, 'files' or a FileShuffleConfig")
    order = np.random.default_rng(shuffle.seed).permutation(len(files))
    return [files[i] for i in order]


__all__ = ["FileShuffleConfig", "shuffled_files"]
