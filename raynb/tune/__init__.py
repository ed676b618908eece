"""Hyperparameter tuning on the warm pool (names and semantics of ``ray.tune``).

::

    from raynb import tune

    def objective(config):
        for step in range(10):
            tune.report({"loss": (config["x"] - 3) ** 2 / (step + 1)})

    grid = tune.Tuner(objective, param_space={"x": tune.uniform(0, 10)},
                      tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=20,
                                                  scheduler=tune.schedulers.ASHAScheduler())).fit()
    grid.get_best_result().config
"""
from ..train import get_checkpoint, get_context, report
from ..train.checkpoint import Checkpoint
from ..train.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from . import logger, schedulers, search
from .callback import Callback
from .result_grid import ResultGrid, TrialResult
from .search import (BasicVariantGenerator, ConcurrencyLimiter, choice, grid_search, lograndint,
                     loguniform, qlograndint, qloguniform, qrandint, qrandn, quniform, randint, randn,
                     sample_from, uniform)
from .trial import Trial
from .tune_config import TuneConfig
from .tuner import Tuner


def with_parameters(trainable, **kwargs):
    """``trainable`` with extra keyword arguments bound (``ray.tune.with_parameters``):
    ``Tuner(with_parameters(train, data=data))`` calls ``train(config, data=data)`` in each
    trial. The values are pickled and shipped with every trial.

    Raises:
        TypeError: ``trainable`` is not a function."""
    import functools

    if not callable(trainable):
        raise TypeError(f"with_parameters() takes a function, got {type(trainable).__name__}")

    @functools.wraps(trainable)
    def inner(config):
        return trainable(config, **kwargs)

    return inner


def __getattr__(name):
    if name == "OptunaSearch":
        from .search.optuna import OptunaSearch

        return OptunaSearch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Tuner", "TuneConfig", "ResultGrid", "TrialResult", "Trial", "Callback", "logger", "report",
           "get_checkpoint", "get_context", "Checkpoint", "CheckpointConfig", "FailureConfig", "RunConfig",
           "ScalingConfig", "schedulers", "search", "BasicVariantGenerator", "ConcurrencyLimiter",
           "OptunaSearch", "choice", "grid_search", "lograndint", "loguniform", "qlograndint",
           "qloguniform", "qrandint", "qrandn", "quniform", "randint", "randn", "sample_from",
           "uniform", "with_parameters"]
