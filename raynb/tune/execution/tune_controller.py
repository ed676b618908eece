"""``ray.tune.execution.tune_controller``: :class:`TuneController`, the driver loop that
runs an experiment's trials. Scripts import it for type hints (a
``ResourceChangingScheduler`` allocation function's first argument); build experiments with
``Tuner``: raynb's controller takes its own arguments, not Ray's."""

from ..controller import TuneController

__all__ = ["TuneController"]
