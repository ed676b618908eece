"""``ray.tune.experiment``: :class:`Trial`, one configuration's run in an experiment (the
same class as ``raynb.tune.Trial``)."""

from ..trial import Trial

__all__ = ["Trial"]
