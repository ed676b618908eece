"""Ray Tune's ``HyperBandForBOHB``: the HyperBand schedule that BOHB runs under.

Ray's version fills each bracket with the searcher's suggestions and pauses trials at a
rung until the rung is full. raynb's :class:`HyperBandScheduler` already decides at each
rung from the trials that reached it; ``TuneBOHB`` reads every trial's budget from its
reports (``training_iteration``, or the scheduler's ``time_attr``), so this is the same
schedule under Ray's name, with Ray's arguments.
"""

from __future__ import annotations

from .hyperband import HyperBandScheduler


class HyperBandForBOHB(HyperBandScheduler):
    """HyperBand for :class:`~raynb.tune.search.bohb.TuneBOHB` (Ray's arguments:
    ``time_attr``, ``metric``, ``mode``, ``max_t``, ``reduction_factor``,
    ``stop_last_trials``; see :class:`HyperBandScheduler`)."""
