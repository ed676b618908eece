"""MLflow from inside a training function: :func:`setup_mlflow`
(``ray.air.integrations.mlflow.setup_mlflow``).

``mlflow`` is imported only when it is called, on the rank that logs.
"""
from __future__ import annotations

import os

from ..cluster import task_context
from . import session
from .callback import flatten

# MLflow's own limit on a parameter's value (characters).
PARAM_VALUE_MAX = 6000
_END_STATUS = {"ok": "FINISHED", "cancelled": "KILLED"}


class _NoopModule:
    """What ``setup_mlflow`` returns on the ranks that do not log: every attribute is a
    function that does nothing (``mlflow.log_metric(...)`` just returns None)."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None

    def __repr__(self) -> str:
        return "<mlflow stand-in: this rank does not log>"


def mlflow_params(config: dict) -> dict:
    """A config as MLflow params: nested keys joined with ``/``, values as strings of at
    most :data:`PARAM_VALUE_MAX` characters."""
    return {k: str(v)[:PARAM_VALUE_MAX] for k, v in flatten(config).items()}


def setup_mlflow(config: dict | None = None, tracking_uri: str | None = None, *,
                 experiment_name: str | None = None, run_name: str | None = None, tags: dict | None = None,
                 rank_zero_only: bool = True):
    """Start an MLflow run for this training run, from inside the training function.

    On rank 0 (every rank with ``rank_zero_only=False``) it sets the tracking URI and the
    experiment, starts a run, logs ``config`` as its params and returns the ``mlflow``
    module, so ``mlflow.log_metric(...)`` logs to that run. The run ends when the training
    function ends: FINISHED, FAILED if it raised, KILLED if cancelled (the warm worker
    lives on, so raynb ends it for you). On the other ranks it returns a stand-in whose
    every function does nothing.

    Args:
        config (dict | None): logged as the run's params (nested keys as ``a/b``).
        tracking_uri (str | None): e.g. ``"sqlite:///mlflow.db"`` or ``"http://host:5000"``;
            None uses ``$MLFLOW_TRACKING_URI`` or MLflow's default. A relative path is the
            notebook's working directory (the ranks run there).
        experiment_name (str | None): created if missing; default ``$MLFLOW_EXPERIMENT_NAME``,
            else this run's name.
        run_name (str | None): default this run's name.
        tags (dict | None): set on the run.
        rank_zero_only (bool): log from rank 0 only (the default).

    Returns:
        The ``mlflow`` module, or the do-nothing stand-in.

    Raises:
        RuntimeError: called outside a training function.
        ImportError: ``mlflow`` is not installed on the workers.
    """
    task = session._require("setup_mlflow")
    if rank_zero_only and task["rank"] != 0:
        return _NoopModule()
    try:
        import mlflow
    except ImportError as e:
        raise ImportError(f"setup_mlflow() needs mlflow on the workers ({e}): pip install mlflow-skinny "
                          "(or pip install 'raynb[tracking]')") from None
    previous_uri = mlflow.get_tracking_uri()
    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_experiment(experiment_name or os.environ.get("MLFLOW_EXPERIMENT_NAME") or task["name"])
    if mlflow.active_run() is not None:  # left by code of an earlier task on this warm worker
        mlflow.end_run("KILLED")
    mlflow.start_run(run_name=run_name or task["name"], tags=tags)
    if config:
        mlflow.log_params(mlflow_params(config))

    def end(status: str) -> None:
        try:
            if mlflow.active_run() is not None:
                mlflow.end_run(_END_STATUS.get(status, "FAILED"))
        finally:
            if tracking_uri:  # the next task on this warm worker starts from the same default
                mlflow.set_tracking_uri(previous_uri)

    task_context.at_end(end)
    return mlflow
