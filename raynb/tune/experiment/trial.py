"""``ray.tune.experiment.trial``: :class:`Trial` (the same class as ``raynb.tune.Trial``)."""

from ..trial import Trial

__all__ = ["Trial"]
