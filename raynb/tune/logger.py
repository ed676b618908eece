"""Loggers: :class:`LoggerCallback` (``ray.tune.logger.LoggerCallback``) and
:class:`TBXLoggerCallback`, which writes TensorBoard event files.

A logger is a :class:`~raynb.tune.Callback` with three simpler hooks, ``log_trial_start``,
``log_trial_result`` and ``log_trial_end(failed)``. ``TBXLoggerCallback`` is defined here,
Ray's module for it, and re-exported by ``raynb.integrations.tensorboard``; the MLflow
logger is in ``raynb.integrations.mlflow``.
"""

from __future__ import annotations

import numbers

from ..train.experiment_callback import Callback, flatten

# Report fields that are no metric of their own (Ray's TBXLogger leaves them out too).
NOT_SCALARS = (
    "config",
    "pid",
    "timestamp",
    "time_total_s",
    "training_iteration",
    "trial_id",
    "date",
    "hostname",
    "node_ip",
    "done",
)


def numbers_of(result: dict, skip=NOT_SCALARS) -> dict:
    """The numeric values of a report, flattened (``a/b``), without the ``skip`` fields."""
    return {
        k: float(v)
        for k, v in flatten({k: v for k, v in result.items() if k not in skip}).items()
        if isinstance(v, numbers.Real)
    }


class LoggerCallback(Callback):
    """A callback that logs each trial (``ray.tune.logger.LoggerCallback``): override
    ``log_trial_start``, ``log_trial_result`` and ``log_trial_end``."""

    def log_trial_start(self, trial) -> None:
        """The trial started (again, after a PBT exploit or a resume)."""

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        """The trial reported ``result``."""

    def log_trial_end(self, trial, failed: bool = False) -> None:
        """The trial ended; ``failed`` when in ERROR."""

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        self.log_trial_start(trial)

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        self.log_trial_result(iteration, trial, result)

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        self.log_trial_end(trial, failed=False)

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        self.log_trial_end(trial, failed=True)


def _hparam(value):
    """A config value TensorBoard's hparams take: bool, int, float or str."""
    if isinstance(value, (bool, int, float, str)):
        return value
    return float(value) if isinstance(value, numbers.Real) else str(value)


class TBXLoggerCallback(LoggerCallback):
    """Each trial's reports as TensorBoard scalars, in the trial's directory
    (``ray.tune.logger.TBXLoggerCallback``).

    Every numeric field of a report is a scalar (nested dicts flattened: ``a/b``) at
    step ``training_iteration``; when the trial ends its config is written as hparams,
    with its final metrics. Each trial (a TorchTrainer's run) is one TensorBoard run, so::

        %load_ext tensorboard
        %tensorboard --logdir <the experiment's (or the run's) directory>

    shows them side by side. Needs the ``tensorboard`` package (``pip install tensorboard``).

    Args:
        flush_secs (float): how often the event files are flushed while a trial runs (s).

    Raises:
        ImportError: ``tensorboard`` is not installed (when the logger is made).
    """

    def __init__(self, flush_secs: float = 2.0):
        import importlib.util

        if importlib.util.find_spec("tensorboard") is None:
            raise ImportError(
                "TBXLoggerCallback needs the tensorboard package: pip install tensorboard "
                "(or pip install 'raynb[tracking]')"
            )
        self.flush_secs = flush_secs
        self._writers: dict = {}

    def __getstate__(self):  # the settings only: a Tuner pickles its RunConfig for restore
        return {"flush_secs": self.flush_secs}

    def __setstate__(self, state):
        self.__dict__.update(state, _writers={})

    def setup(self, *args, **info) -> None:
        self._close_all()

    def _writer(self, trial):
        w = self._writers.get(trial.trial_id)
        if w is None and trial.path:
            from torch.utils.tensorboard import SummaryWriter

            w = self._writers[trial.trial_id] = SummaryWriter(trial.path, flush_secs=self.flush_secs)
        return w

    def log_trial_start(self, trial) -> None:
        self._writer(trial)

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        w = self._writer(trial)
        if w is None:
            return
        step = result.get("training_iteration", iteration)
        walltime = result.get("timestamp")
        for tag, value in numbers_of(result).items():
            w.add_scalar(tag, value, global_step=step, walltime=walltime)

    def log_trial_end(self, trial, failed: bool = False) -> None:
        w = self._writer(trial)
        if w is None:
            return
        from torch.utils.tensorboard.summary import hparams

        config = {k: _hparam(v) for k, v in flatten(trial.config or {}).items()}
        metrics = numbers_of(trial.last_result)
        if config:
            step = trial.last_result.get("training_iteration")
            for summary in hparams(config, metrics):
                w.file_writer.add_summary(summary, step)
        self._writers.pop(trial.trial_id, None)
        w.close()

    def on_experiment_end(self, trials, **info) -> None:
        self._close_all()

    def _close_all(self) -> None:
        writers, self._writers = self._writers, {}
        for w in writers.values():
            w.close()


class _AlwaysWritten(LoggerCallback):
    """A Ray logger whose files raynb writes for every trial anyway."""

    def __init__(self, *args, **kwargs):
        from ..client.no_effect import accepted_no_effect

        accepted_no_effect(
            f"{type(self).__name__}()", "raynb writes every trial's result.json and progress.csv itself"
        )


class CSVLoggerCallback(_AlwaysWritten):
    """``ray.tune.logger.CSVLoggerCallback``: each trial's ``progress.csv`` (always written)."""


class JsonLoggerCallback(_AlwaysWritten):
    """``ray.tune.logger.JsonLoggerCallback``: each trial's ``result.json`` (always written)."""


def pretty_print(result: dict, exclude: set | None = None) -> str:
    """A result dict as readable YAML (Ray's ``tune.logger.pretty_print``): ``config`` and
    ``exclude``'s keys left out, values that YAML cannot hold written as their repr."""
    import json

    import yaml

    skip = {"config", "hist_stats", *(exclude or ())}
    clean = {k: v for k, v in result.items() if k not in skip and v is not None}
    plain = json.loads(json.dumps(clean, default=repr))
    return yaml.safe_dump(plain, default_flow_style=False, sort_keys=True)
