"""``ray.tune.execution.placement_groups``: :class:`PlacementGroupFactory`, a trial's
resource request as bundles (the same class as ``raynb.tune.PlacementGroupFactory``)."""

from ...train.resources import PlacementGroupFactory

__all__ = ["PlacementGroupFactory"]
