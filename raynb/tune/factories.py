"""Search algorithms and schedulers by name (Ray Tune's ``tune.create_searcher`` and
``tune.create_scheduler``), and Ray's ``ResumeConfig`` / ``TuneContext`` names."""

from __future__ import annotations

import dataclasses
import enum
import importlib

from ..train.session import TrainContext

# name -> (module under raynb.tune, class name); imported on use (optional libraries).
SEARCHERS = {
    "variant_generator": ("search.basic_variant", "BasicVariantGenerator"),
    "random": ("search.basic_variant", "BasicVariantGenerator"),
    "ax": ("search.ax", "AxSearch"),
    "bayesopt": ("search.bayesopt", "BayesOptSearch"),
    "bohb": ("search.bohb", "TuneBOHB"),
    "hebo": ("search.hebo", "HEBOSearch"),
    "hyperopt": ("search.hyperopt", "HyperOptSearch"),
    "nevergrad": ("search.nevergrad", "NevergradSearch"),
    "optuna": ("search.optuna", "OptunaSearch"),
    "zoopt": ("search.zoopt", "ZOOptSearch"),
}
SCHEDULERS = {
    "fifo": ("schedulers.fifo", "FIFOScheduler"),
    "async_hyperband": ("schedulers.async_hyperband", "AsyncHyperBandScheduler"),
    "asynchyperband": ("schedulers.async_hyperband", "AsyncHyperBandScheduler"),
    "median_stopping_rule": ("schedulers.median_stopping_rule", "MedianStoppingRule"),
    "medianstopping": ("schedulers.median_stopping_rule", "MedianStoppingRule"),
    "hyperband": ("schedulers.hyperband", "HyperBandScheduler"),
    "hb_bohb": ("schedulers.hb_bohb", "HyperBandForBOHB"),
    "pbt": ("schedulers.pbt", "PopulationBasedTraining"),
    "pbt_replay": ("schedulers.pbt_replay", "PopulationBasedTrainingReplay"),
    "pb2": ("schedulers.pb2", "PB2"),
    "resource_changing": ("schedulers.resource_changing_scheduler", "ResourceChangingScheduler"),
}


def _create(kind: str, table: dict, name: str, kwargs: dict):
    if name not in table:
        raise ValueError(f"create_{kind}({name!r}): unknown {kind}; known: {sorted(table)}")
    module, cls = table[name]
    return getattr(importlib.import_module(f"raynb.tune.{module}"), cls)(**kwargs)


def create_searcher(search_alg: str, **kwargs):
    """A search algorithm by Ray's name ("hyperopt", "optuna", ...), built with ``kwargs``.

    Raises:
        ValueError: an unknown name. ImportError: its library is not installed.
    """
    return _create("searcher", SEARCHERS, search_alg, kwargs)


def create_scheduler(scheduler: str, **kwargs):
    """A trial scheduler by Ray's name ("asynchyperband", "pbt", ...), built with ``kwargs``.

    Raises:
        ValueError: an unknown name.
    """
    return _create("scheduler", SCHEDULERS, scheduler, kwargs)


class ResumeType(enum.Enum):
    """What ``Tuner.restore`` does with a trial of a given state."""

    RESUME = "resume"
    RESTART = "restart"
    SKIP = "skip"


@dataclasses.dataclass
class ResumeConfig:
    """Ray's ``tune.ResumeConfig``: how restored trials go on, by their state.

    raynb's ``Tuner.restore`` takes the same choices as keywords;
    ``Tuner.restore(path, trainable, **cfg.restore_kwargs())`` passes them (finished
    trials are always kept as they are).
    """

    ResumeType = ResumeType
    finished: ResumeType = ResumeType.SKIP
    unfinished: ResumeType = ResumeType.RESUME
    errored: ResumeType = ResumeType.SKIP

    def restore_kwargs(self) -> dict:
        """The ``Tuner.restore`` keywords that mean this config."""
        return {
            "resume_unfinished": self.unfinished is not ResumeType.SKIP,
            "resume_errored": self.errored is ResumeType.RESUME,
            "restart_errored": self.errored is ResumeType.RESTART,
        }


class TuneContext(TrainContext):
    """Ray's ``tune.TuneContext``: what ``tune.get_context()`` returns inside a trial
    (raynb returns its :class:`~raynb.train.TrainContext`, which has the same methods)."""
