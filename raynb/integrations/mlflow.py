"""MLflow: :class:`MLflowLoggerCallback` (``ray.air.integrations.mlflow.MLflowLoggerCallback``)
logs each trial as an MLflow run from the notebook process; :func:`setup_mlflow` logs from
inside a training function (rank 0).

``mlflow`` (``mlflow-skinny`` is enough) is imported when a run starts, not when this
module is.
"""
from __future__ import annotations

import importlib.util
import os
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

from ..train.tracking import mlflow_params, setup_mlflow
from ..tune.logger import LoggerCallback, numbers_of

# MLflow's limits on one log_batch call.
MAX_PARAMS, MAX_METRICS = 100, 1000
# How long the check that an http(s) tracking server is there may take (s).
CONNECT_TIMEOUT_S = 2.0
# Report fields that are no metric (the step is training_iteration; timestamp is the time).
NOT_METRICS = ("config", "pid", "timestamp", "trial_id", "date", "hostname", "node_ip", "done")


def _unreachable(uri: str) -> str | None:
    """Why an http(s) tracking server cannot be reached, or None (other stores are
    checked by opening them)."""
    u = urlparse(uri)
    if u.scheme not in ("http", "https"):
        return None
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        socket.create_connection((u.hostname or "localhost", port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        return f"cannot connect to {u.hostname}:{port}: {e}"
    return None


class MLflowLoggerCallback(LoggerCallback):
    """Each trial as an MLflow run (``ray.air.integrations.mlflow.MLflowLoggerCallback``).

    Its config is logged as params when it starts (nested keys as ``a/b``), each report's
    numeric fields as metrics at step ``training_iteration``, and its status when it ends:
    FINISHED (TERMINATED, STOPPED), FAILED (ERROR), KILLED (interrupted). For a ``Tuner``
    the trials' runs are nested in one parent run for the experiment; a
    ``TorchTrainer.fit()`` is one run.

    If the tracking store cannot be reached when the run starts, one warning says so and
    nothing is logged to MLflow; the training goes on.

    Args:
        tracking_uri (str | None): e.g. ``"sqlite:///mlflow.db"``, ``"http://host:5000"``;
            None: ``$MLFLOW_TRACKING_URI``, else MLflow's default.
        experiment_name (str | None): created if missing; default ``$MLFLOW_EXPERIMENT_NAME``,
            else the raynb experiment's (or run's) name.
        tags (dict | None): set on every run this logger creates.
        save_artifact (bool): log each committed checkpoint's files as artifacts of the
            trial's run (under the checkpoint's directory name).

    Raises:
        ImportError: ``mlflow`` is not installed (when the logger is made).
    """

    def __init__(self, tracking_uri: str | None = None, experiment_name: str | None = None,
                 tags: dict | None = None, save_artifact: bool = False):
        if importlib.util.find_spec("mlflow") is None:
            raise ImportError("MLflowLoggerCallback needs mlflow: pip install mlflow-skinny "
                              "(or pip install 'raynb[tracking]')")
        self.tracking_uri, self.experiment_name = tracking_uri, experiment_name
        self.tags, self.save_artifact = dict(tags or {}), save_artifact
        self._reset()

    def _reset(self) -> None:
        self._client = None
        self._experiment_id = self._parent = None
        self._runs: dict[str, str] = {}      # trial_id -> MLflow run id
        self._open: set[str] = set()         # trial ids whose run has not ended
        self._pending: dict[str, list] = {}  # run id -> metrics not sent yet

    def __getstate__(self):  # the settings only: a Tuner pickles its RunConfig for restore
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    # -- the experiment -----------------------------------------------------------------
    def setup(self, *args, **info) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient

        self._reset()
        uri = self.tracking_uri or mlflow.get_tracking_uri()
        name = self.experiment_name or os.environ.get("MLFLOW_EXPERIMENT_NAME") or info.get(
            "experiment_name") or "Default"
        problem = _unreachable(uri)
        if problem is None:
            try:
                client = MlflowClient(uri)
                experiment = client.get_experiment_by_name(name)
                self._experiment_id = (experiment.experiment_id if experiment is not None
                                       else client.create_experiment(name))
                if info.get("kind") == "Tuner":
                    self._parent = client.create_run(self._experiment_id, run_name=info.get("experiment_name"),
                                                     tags=self.tags).info.run_id
                self._client = client
            except Exception as e:  # noqa: BLE001 - any store error: said once, training goes on
                problem = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if problem is not None:
            self._client = None
            sys.stderr.write(f"warning: MLflowLoggerCallback cannot reach the MLflow tracking store "
                             f"{uri!r} ({problem}); nothing is logged to MLflow in this run, the "
                             "training goes on\n")
            sys.stderr.flush()

    def on_experiment_end(self, trials, **info) -> None:
        if self._client is None:
            return
        self.flush()
        for trial_id in sorted(self._open):  # interrupted: their trials did not end
            self._client.set_terminated(self._runs[trial_id], "KILLED")
        if self._parent is not None:
            self._client.set_terminated(self._parent, "KILLED" if self._open else "FINISHED")
        self._open.clear()

    # -- the trials -----------------------------------------------------------------------
    def log_trial_start(self, trial) -> None:
        if self._client is None or trial.trial_id in self._runs:
            if self._client is not None:
                self._open.add(trial.trial_id)  # resumed, or continued after a PBT exploit
            return
        from mlflow.entities import Param

        tags = {**self.tags, "trial_name": str(trial), "trial_id": trial.trial_id}
        if self._parent is not None:
            tags["mlflow.parentRunId"] = self._parent
        run_id = self._client.create_run(self._experiment_id, run_name=str(trial), tags=tags).info.run_id
        self._runs[trial.trial_id] = run_id
        self._open.add(trial.trial_id)
        params = [Param(k, v) for k, v in mlflow_params(trial.config or {}).items()]
        for i in range(0, len(params), MAX_PARAMS):
            self._client.log_batch(run_id, params=params[i:i + MAX_PARAMS])

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        run_id = self._runs.get(trial.trial_id) if self._client is not None else None
        if run_id is None:
            return
        from mlflow.entities import Metric

        step = int(result.get("training_iteration", iteration))
        ms = int(1000 * (result.get("timestamp") or time.time()))
        self._pending.setdefault(run_id, []).extend(
            Metric(k, v, ms, step) for k, v in numbers_of(result, NOT_METRICS).items())

    def flush(self) -> None:
        """Send the metrics logged since the last flush, in batches (MLflow's ``log_batch``)."""
        pending, self._pending = self._pending, {}
        for run_id, metrics in pending.items():
            for i in range(0, len(metrics), MAX_METRICS):
                self._client.log_batch(run_id, metrics=metrics[i:i + MAX_METRICS])

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info) -> None:
        run_id = self._runs.get(trial.trial_id) if self._client is not None else None
        if run_id is None or not self.save_artifact:
            return
        path = Path(checkpoint.path)
        if path.is_dir():  # else pruned already (CheckpointConfig.num_to_keep)
            self._client.log_artifacts(run_id, str(path), artifact_path=path.name)

    def log_trial_end(self, trial, failed: bool = False) -> None:
        run_id = self._runs.get(trial.trial_id) if self._client is not None else None
        if run_id is None:
            return
        self.flush()
        self._client.set_terminated(run_id, "FAILED" if failed else "FINISHED")
        self._open.discard(trial.trial_id)


__all__ = ["MLflowLoggerCallback", "setup_mlflow"]
