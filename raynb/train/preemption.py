"""``ray.train.PreemptionInfo`` and ``get_preemption_info()`` on raynb.

Ray Train learns from the cluster that a node will be reclaimed (a spot instance) and tells
the ranks before it goes. raynb's node agents get no such notice from the machines they run
on, so ``get_preemption_info()`` returns None on every rank (no preemption detected, Ray's
meaning of None); a node that goes away takes its ranks with it, and
``FailureConfig(max_failures=...)`` restarts the run from its latest checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import session as _session


@dataclass(frozen=True)
class PreemptionInfo:
    """An imminent preemption (Ray's ``PreemptionInfo``).

    Attributes:
        deadline_ms (int | None): earliest reclaim deadline, UNIX time in milliseconds.
        preempted_node_to_ranks (dict[str, list[int]]): node id -> the world ranks on it.
    """

    deadline_ms: int | None = None
    preempted_node_to_ranks: dict = field(default_factory=dict)

    @property
    def preempted_node_ids(self) -> list:
        """The preempted nodes' ids, sorted."""
        return sorted(self.preempted_node_to_ranks)

    @property
    def preempted_ranks(self) -> list:
        """Every affected world rank, sorted ascending."""
        return sorted({r for ranks in self.preempted_node_to_ranks.values() for r in ranks})


def get_preemption_info() -> PreemptionInfo | None:
    """The preemption this run's nodes face, or None (``ray.train.get_preemption_info``).

    Returns:
        None on raynb: its nodes receive no preemption notices (see the module's docstring).

    Raises:
        RuntimeError: called outside a training function.
    """
    _session._require("get_preemption_info")
    return None
