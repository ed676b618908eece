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
from ..train.config import CheckpointConfig, FailureConfig, Result, RunConfig, ScalingConfig
from ..train.sync_config import SyncConfig
from . import (
    logger,
    progress_reporter,  # noqa: F401 - raynb.tune.progress_reporter.CLIReporter
    schedulers,
    search,
    stopper,  # noqa: F401 - raynb.tune.stopper.MaximumIterationStopper
)
from .callback import Callback
from .factories import ResumeConfig, TuneContext, create_scheduler, create_searcher
from .legacy import ExperimentAnalysis, TuneError, run
from .progress_reporter import CLIReporter, JupyterNotebookReporter, ProgressReporter
from .registry import register_env, register_trainable
from .result_grid import ResultGrid, TrialResult
from .search import (
    BasicVariantGenerator,
    ConcurrencyLimiter,
    choice,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from .stopper import Stopper
from .trainable import Trainable
from .trainable_util import PlacementGroupFactory, with_parameters, with_resources
from .trial import Trial
from .tune_config import TuneConfig
from .tuner import Tuner


def __getattr__(name):
    if name == "OptunaSearch":
        from .search.optuna import OptunaSearch

        return OptunaSearch
    if name in ("Experiment", "run_experiments"):
        from . import experiments

        return getattr(experiments, name)
    raise AttributeError(
        f"module {__name__!r} has no attribute {name!r}; the Ray Tune names raynb serves, "
        "and those it does not, are listed in docs/coming-from-ray.md"
    )


__all__ = [
    "Tuner",
    "TuneConfig",
    "ResultGrid",
    "TrialResult",
    "Trial",
    "Callback",
    "logger",
    "report",
    "get_checkpoint",
    "get_context",
    "Checkpoint",
    "CheckpointConfig",
    "FailureConfig",
    "RunConfig",
    "ScalingConfig",
    "schedulers",
    "search",
    "BasicVariantGenerator",
    "ConcurrencyLimiter",
    "OptunaSearch",
    "choice",
    "grid_search",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "sample_from",
    "uniform",
    "with_parameters",
    "with_resources",
    "PlacementGroupFactory",
    "stopper",
    "Stopper",
    "Result",
    "SyncConfig",
    "Trainable",
    "run",
    "ExperimentAnalysis",
    "TuneError",
    "CLIReporter",
    "JupyterNotebookReporter",
    "ProgressReporter",
    "register_trainable",
    "register_env",
    "create_searcher",
    "create_scheduler",
    "ResumeConfig",
    "TuneContext",
    "Experiment",
    "run_experiments",
]
