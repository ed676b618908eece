"""Ray Tune's ``SearchAlgorithm`` and ``SearchGenerator`` names.

In Ray a ``SearchAlgorithm`` makes trials and a ``SearchGenerator`` adapts a
:class:`Searcher` (which makes configs) to it. raynb's Tune driver takes a Searcher
directly, so ``SearchAlgorithm`` is the Searcher interface under Ray's older name and
``SearchGenerator(searcher)`` passes every call through to the searcher it wraps.
"""

from __future__ import annotations

from .searcher import Searcher
from .wrapping import WrappingSearcher


class SearchAlgorithm(Searcher):
    """Base of search algorithms under Ray's name: the :class:`Searcher` interface."""


class SearchGenerator(WrappingSearcher, SearchAlgorithm):
    """Wraps ``searcher`` as Ray's ``SearchGenerator`` does (usable as ``search_alg``).

    Args:
        searcher (Searcher): the search algorithm that makes the configs.

    Raises:
        TypeError: ``searcher`` is not a Searcher.
    """

    def __init__(self, searcher: Searcher):
        super().__init__(searcher, example="HyperOptSearch")

    def is_finished(self) -> bool:
        return False
