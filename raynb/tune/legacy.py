"""Ray Tune's older entry point, still in many scripts: ``tune.run(...)`` returning an
:class:`ExperimentAnalysis` (``ray.tune.run``, ``ray.tune.ExperimentAnalysis``).

``tune.run`` builds a :class:`~raynb.tune.Tuner` from its arguments and runs it; the
analysis reads the :class:`~raynb.tune.ResultGrid`.
"""

from __future__ import annotations

from ..client.no_effect import accepted_no_effect
from ..train.config import CheckpointConfig, FailureConfig, RunConfig
from .result_grid import ResultGrid
from .trainable_util import with_resources
from .tune_config import TuneConfig
from .tuner import Tuner


class TuneError(RuntimeError):
    """A trial of ``tune.run(raise_on_failed_trial=True)`` failed (``ray.tune.TuneError``)."""


class ExperimentAnalysis:
    """The trials of a ``tune.run`` experiment (``ray.tune.ExperimentAnalysis``).

    Attributes:
        trials (list[Trial]): every trial (``trial_id``, ``config``, ``status``, ``last_result``).
        experiment_path (str): the experiment directory.
    """

    def __init__(self, grid: ResultGrid, metric: str | None, mode: str | None):
        self._grid, self.default_metric, self.default_mode = grid, metric, mode
        self.trials = list(grid._trials)
        self.experiment_path = grid.experiment_path

    def _best(self, metric, mode, scope="last"):
        try:
            return self._grid.get_best_result(metric or self.default_metric, mode or self.default_mode, scope)
        except RuntimeError:
            return None  # no trial reported the metric

    def get_best_trial(self, metric: str | None = None, mode: str | None = None, scope: str = "last"):
        """The best trial by ``metric`` (default: ``tune.run(metric=)``), or None."""
        best = self._best(metric, mode, scope)
        return best._trial if best is not None else None

    def get_best_config(self, metric: str | None = None, mode: str | None = None, scope: str = "last"):
        """The best trial's config, or None."""
        best = self._best(metric, mode, scope)
        return best.config if best is not None else None

    def get_best_checkpoint(self, trial=None, metric: str | None = None, mode: str | None = None):
        """The latest checkpoint of ``trial`` (default: the best trial), or None."""
        trial = trial or self.get_best_trial(metric, mode)
        match = [r for r in self._grid if trial is not None and r.trial_id == trial.trial_id]
        return match[0].checkpoint if match else None

    @property
    def best_trial(self):
        return self.get_best_trial()

    @property
    def best_config(self) -> dict | None:
        return self.get_best_config()

    @property
    def best_result(self) -> dict | None:
        best = self._best(None, None)
        return best.metrics if best is not None else None

    @property
    def best_checkpoint(self):
        return self.get_best_checkpoint()

    @property
    def best_path(self) -> str | None:
        trial = self.best_trial
        return trial.path if trial is not None else None

    best_logdir = best_path

    @property
    def results(self) -> dict:
        """trial_id -> its last result."""
        return {t.trial_id: t.last_result for t in self.trials}

    @property
    def results_df(self):
        """One row per trial: its last result, with ``config/...`` columns, indexed by trial_id."""
        return self._grid.get_dataframe().set_index("trial_id", drop=False)

    @property
    def best_result_df(self):
        df = self.results_df
        trial = self.best_trial
        return df.loc[[trial.trial_id]] if trial is not None else df.iloc[:0]

    def dataframe(self, metric: str | None = None, mode: str | None = None):
        """One row per trial: its last result (``metric``/``mode``: its best one instead)."""
        if metric is None:
            return self._grid.get_dataframe()
        return self._grid.get_dataframe(filter_metric=metric, filter_mode=mode or self.default_mode or "max")

    @property
    def trial_dataframes(self) -> dict:
        """trial path -> every report of that trial (a DataFrame)."""
        return {r.path: r.metrics_dataframe for r in self._grid}

    def __repr__(self) -> str:
        return f"ExperimentAnalysis({self._grid!r})"


_NO_EFFECT = {
    "sync_config": "run directories are on the head's file system",
    "export_formats": "no model export",
    "log_to_file": "every rank's output is kept in the run directory",
    "reuse_actors": None,
    "progress_reporter": None,
    "local_dir": None,
    "chdir_to_trial_dir": None,
}


# tune.run's arguments that TuneConfig takes under the same names.
_TUNE_CONFIG_ARGUMENTS = (
    "metric",
    "mode",
    "search_alg",
    "scheduler",
    "num_samples",
    "max_concurrent_trials",
    "time_budget_s",
    "reuse_actors",
    "trial_name_creator",
    "trial_dirname_creator",
)


def run(
    run_or_experiment,
    *,
    name=None,
    metric=None,
    mode=None,
    stop=None,
    time_budget_s=None,
    config=None,
    resources_per_trial=None,
    num_samples=1,
    storage_path=None,
    search_alg=None,
    scheduler=None,
    checkpoint_config=None,
    verbose=None,
    progress_reporter=None,
    trial_name_creator=None,
    trial_dirname_creator=None,
    max_failures=0,
    fail_fast=False,
    raise_on_failed_trial=True,
    callbacks=None,
    max_concurrent_trials=None,
    reuse_actors=False,
    resume=None,
    **ray_only,
):
    """Run a Tune experiment, Ray's older way (``ray.tune.run``); see :class:`Tuner`.

    Returns:
        ExperimentAnalysis: the trials, best config and result, result frames.

    Raises:
        TuneError: a trial failed and ``raise_on_failed_trial`` (the default).
        TypeError: an argument ``tune.run`` does not take (named, with what to use).
        ValueError: ``resume`` (use ``Tuner.restore``); as :class:`Tuner` does.
    """
    arguments = locals()  # first, so it holds exactly tune.run's arguments
    _refuse_ray_only(ray_only, resume)
    trainable = run_or_experiment
    if resources_per_trial is not None:
        trainable = with_resources(trainable, resources_per_trial)
    rc = RunConfig(
        name=name,
        storage_path=storage_path,
        stop=stop,
        verbose=1 if verbose is None else verbose,
        progress_reporter=progress_reporter,
        callbacks=list(callbacks) if callbacks else None,
        checkpoint_config=checkpoint_config or CheckpointConfig(),
        failure_config=FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
    )
    tc = TuneConfig(**{key: arguments[key] for key in _TUNE_CONFIG_ARGUMENTS})
    grid = Tuner(trainable, param_space=config, tune_config=tc, run_config=rc).fit()
    if raise_on_failed_trial and grid.errors:
        failed = [r.trial_id for r in grid if r.error is not None]
        raise TuneError(f"trials did not complete: {failed}; the first error: {grid.errors[0]}")
    return ExperimentAnalysis(grid, metric, mode)


def _refuse_ray_only(ray_only: dict, resume) -> None:
    """Note tune.run's arguments that have no effect in raynb; refuse the ones it does not serve.

    Raises:
        TypeError: an argument raynb does not serve (naming Tuner as the way).
        ValueError: ``resume`` (Tuner.restore is the way).
    """
    for key, value in ray_only.items():
        if key in ("sync_config", "export_formats", "log_to_file", "local_dir", "storage_filesystem"):
            if value:
                accepted_no_effect(
                    f"tune.run({key}=...)", _NO_EFFECT.get(key) or "raynb writes to storage_path"
                )
        else:
            raise TypeError(
                f"tune.run() got an argument raynb does not serve: {key!r}. Use "
                "tune.Tuner(trainable, param_space=..., tune_config=TuneConfig(...), "
                "run_config=RunConfig(...)) and see docs/coming-from-ray.md"
            )
    if resume:
        raise ValueError(
            f"tune.run(resume={resume!r}) is not served: use "
            "tune.Tuner.restore(experiment_path, trainable).fit()"
        )
