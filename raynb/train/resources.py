"""A trial's resource request as Ray's bundles: :class:`PlacementGroupFactory`
(``ray.tune.PlacementGroupFactory``; ``ray.tune.execution.placement_groups``). Read by
``tune.with_resources`` and returned by ``get_context().get_trial_resources()``."""

from __future__ import annotations

import numbers


class PlacementGroupFactory:
    """Ray's per-trial resource request as bundles (``ray.tune.PlacementGroupFactory``):
    ``PlacementGroupFactory([{"CPU": 1, "GPU": 1}])``. Read by :func:`with_resources`.

    Raises:
        ValueError: no bundles, or a bundle that is not a dict of amounts."""

    def __init__(self, bundles: list, strategy: str = "PACK", *args, **kwargs):
        if not bundles or not all(
            isinstance(b, dict) and all(isinstance(v, numbers.Real) for v in b.values()) for b in bundles
        ):
            raise ValueError(f"PlacementGroupFactory({bundles!r}): give a list of dicts of resource amounts")
        self.bundles, self.strategy = [dict(b) for b in bundles], strategy

    @property
    def required_resources(self) -> dict:
        total: dict = {}
        for b in self.bundles:
            for k, v in b.items():
                total[k] = total.get(k, 0) + v
        return total

    @property
    def head_bundle_is_empty(self) -> bool:
        """Whether the first bundle asks for nothing (Ray: the trainable itself needs none)."""
        return not any(self.bundles[0].values())

    @property
    def head_cpus(self) -> float:
        """CPUs of the first bundle (Ray: the trainable's own process)."""
        return self.bundles[0].get("CPU", 0)

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, PlacementGroupFactory)
            and self.bundles == other.bundles
            and self.strategy == other.strategy
        )

    def __hash__(self) -> int:
        return hash((repr(self.bundles), self.strategy))

    def __repr__(self) -> str:
        return f"<PlacementGroupFactory (_bound={self.bundles!r}, strategy={self.strategy!r})>"
