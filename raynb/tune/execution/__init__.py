"""Tune's execution layer as Ray names it (``ray.tune.execution``): ``placement_groups``
(PlacementGroupFactory) and ``tune_controller`` (TuneController, for type hints)."""
