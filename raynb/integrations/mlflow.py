"""MLflow: :class:`MLflowLoggerCallback` (``ray.air.integrations.mlflow.MLflowLoggerCallback``)
logs each trial as an MLflow run from the notebook process (the driver: one writer per
store, whatever the number of concurrent trials); :func:`setup_mlflow` logs from inside a
training function (rank 0).

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

from ..train import mlflow_store
from ..train.tracking import mlflow_params, setup_mlflow
from ..tune.logger import LoggerCallback
from .mlflow_results import metrics_of, ray_result, step_of

# MLflow's limits on one log_batch call.
MAX_PARAMS, MAX_METRICS = 100, 1000
# How long the check that an http(s) tracking server is there may take (s).
CONNECT_TIMEOUT_S = 2.0


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
    """Each trial as an MLflow run (``ray.air.integrations.mlflow.MLflowLoggerCallback``,
    the same arguments and what they mean).

    At a trial's start its config is logged as params (nested keys as ``a/b``; at its end
    instead with ``log_params_on_trial_end``); each report as metrics, as Ray logs its
    result dict: every value ``float()`` takes, flattened, Ray's keys included
    (``config/*``, ``done``, ``training_iteration``, ``iterations_since_restore``,
    ``time_this_iter_s``, ``time_total_s``, ``time_since_restore``, ``timestamp``), at step
    ``timesteps_total`` or ``training_iteration``; at its end its status: FINISHED
    (TERMINATED, STOPPED), FAILED (ERROR), KILLED (interrupted). One flat run per trial, as
    Ray's; ``nest_trials_in_parent_run=True`` nests a ``Tuner``'s trials in one parent run
    for the experiment. A ``TorchTrainer.fit()`` is one run.

    It runs in the driver only (on the callbacks' thread), so concurrent trials never
    write one store from several processes. If the store cannot be reached, one warning
    says so and nothing is logged to MLflow; the training goes on.

    Args:
        tracking_uri (str | None): ``"sqlite:///mlflow.db"``, ``"http://host:5000"``, or a
            file store (``"./mlruns"``, ``"file:///tmp/mlruns"``: made absolute; MLflow 3's
            ``MLFLOW_ALLOW_FILE_STORE`` is set for it). None: ``$MLFLOW_TRACKING_URI``,
            else MLflow's default.
        registry_uri (str | None): MLflow's model registry.
        experiment_name (str | None): created if missing; default ``$MLFLOW_EXPERIMENT_NAME``,
            else the raynb experiment's (or run's) name.
        tags (dict | None): set on every run this logger creates (and ``trial_name``).
        tracking_token (str | None): set as ``$MLFLOW_TRACKING_TOKEN`` (a server's token).
        save_artifact (bool): log the trial's directory (checkpoints, ``result.json`` ...)
            as the run's artifacts when the trial ends.
        log_params_on_trial_end (bool): log the params when the trial ends, not starts.
        nest_trials_in_parent_run (bool): raynb's option: a ``Tuner``'s trial runs nested
            in one parent run named for the experiment (default False: flat, as Ray's).

    Raises:
        ImportError: ``mlflow`` is not installed (when the logger is made).
    """

    def __init__(
        self,
        tracking_uri: str | None = None,
        *,
        registry_uri: str | None = None,
        experiment_name: str | None = None,
        tags: dict | None = None,
        tracking_token: str | None = None,
        save_artifact: bool = False,
        log_params_on_trial_end: bool = False,
        nest_trials_in_parent_run: bool = False,
    ):
        if importlib.util.find_spec("mlflow") is None:
            raise ImportError(
                "MLflowLoggerCallback needs mlflow: pip install mlflow-skinny "
                "(or pip install 'raynb[tracking]')"
            )
        self.tracking_uri, self.registry_uri = tracking_uri, registry_uri
        self.experiment_name, self.tracking_token = experiment_name, tracking_token
        self.tags, self.save_artifact = dict(tags or {}), save_artifact
        self.should_save_artifact = save_artifact  # Ray's attribute name
        self.log_params_on_trial_end = log_params_on_trial_end
        self.nest_trials_in_parent_run = nest_trials_in_parent_run
        self._reset()

    def _reset(self) -> None:
        self._client = None
        self._experiment_id = self._parent = None
        self._runs: dict[str, str] = {}  # trial_id -> MLflow run id
        self._open: set[str] = set()  # trial ids whose run has not ended
        self._pending: dict[str, list] = {}  # run id -> metrics not sent yet
        self._restored: dict[str, tuple] = {}  # trial_id -> (iteration, time) at its (re)start
        self._last_step: dict[str, int] = {}

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
        uri = mlflow_store.tracking_uri(self.tracking_uri) or mlflow.get_tracking_uri()
        if self.tracking_token:
            os.environ["MLFLOW_TRACKING_TOKEN"] = self.tracking_token
        name = (
            self.experiment_name
            or os.environ.get("MLFLOW_EXPERIMENT_NAME")
            or info.get("experiment_name")
            or "Default"
        )
        problem = _unreachable(uri)
        if problem is None:
            try:
                with mlflow_store.allowing_file_store(uri, keep=True), mlflow_store.store_lock(uri):
                    client = MlflowClient(uri, registry_uri=self.registry_uri)
                    self._experiment_id = mlflow_store.experiment_id(client, name=name)
                if self.nest_trials_in_parent_run and info.get("kind") == "Tuner":
                    self._parent = client.create_run(
                        self._experiment_id, run_name=info.get("experiment_name"), tags=self.tags
                    ).info.run_id
                self._client = client
            except Exception as e:  # noqa: BLE001 - any store error: said once, training goes on
                problem = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if problem is not None:
            self._client = None
            sys.stderr.write(
                f"warning: MLflowLoggerCallback cannot reach the MLflow tracking store "
                f"{uri!r} ({problem}); nothing is logged to MLflow in this run, the "
                "training goes on\n"
            )
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
        if self._client is None:
            return
        last = trial.results[-1] if len(trial.results) else {}
        self._restored[trial.trial_id] = (
            last.get("training_iteration") or 0,
            last.get("time_total_s") or 0.0,
        )
        self._open.add(trial.trial_id)
        if trial.trial_id in self._runs:  # resumed, or continued after a PBT exploit
            return
        tags = {**self.tags, "trial_name": str(trial), "trial_id": trial.trial_id}
        if self._parent is not None:
            tags["mlflow.parentRunId"] = self._parent
        run_id = self._client.create_run(self._experiment_id, run_name=str(trial), tags=tags).info.run_id
        self._runs[trial.trial_id] = run_id
        if not self.log_params_on_trial_end:
            self._log_params(run_id, trial.config)

    def _log_params(self, run_id: str, config) -> None:
        from mlflow.entities import Param

        params = [Param(k, v) for k, v in mlflow_params(config or {}).items()]
        for i in range(0, len(params), MAX_PARAMS):
            self._client.log_batch(run_id, params=params[i : i + MAX_PARAMS])

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        run_id = self._runs.get(trial.trial_id) if self._client is not None else None
        if run_id is None:
            return
        self._add(
            run_id,
            trial,
            ray_result(result, trial.config, restored_at=self._restored.get(trial.trial_id, (0, 0.0))),
            iteration,
        )

    def _add(self, run_id: str, trial, result: dict, iteration: int) -> None:
        from mlflow.entities import Metric

        step = self._last_step[trial.trial_id] = step_of(result, iteration)
        ms = int(1000 * (result.get("timestamp") or time.time()))
        self._pending.setdefault(run_id, []).extend(
            Metric(k, v, ms, step) for k, v in metrics_of(result).items()
        )

    def flush(self) -> None:
        """Send the metrics logged since the last flush, in batches (MLflow's ``log_batch``)."""
        pending, self._pending = self._pending, {}
        for run_id, metrics in pending.items():
            for i in range(0, len(metrics), MAX_METRICS):
                self._client.log_batch(run_id, metrics=metrics[i : i + MAX_METRICS])

    def log_trial_end(self, trial, failed: bool = False) -> None:
        run_id = self._runs.get(trial.trial_id) if self._client is not None else None
        if run_id is None:
            return
        step = self._last_step.get(trial.trial_id)
        if step is not None:  # Ray's last result says done
            from mlflow.entities import Metric

            self._pending.setdefault(run_id, []).append(Metric("done", 1.0, int(1000 * time.time()), step))
        self.flush()
        if self.save_artifact and trial.path and Path(trial.path).is_dir():
            self._save_artifacts(run_id, Path(trial.path))
        if self.log_params_on_trial_end:
            self._log_params(run_id, trial.config)
        self._client.set_terminated(run_id, "FAILED" if failed else "FINISHED")
        self._open.discard(trial.trial_id)

    def _save_artifacts(self, run_id: str, path: Path) -> None:
        """The trial's directory, as Ray's ``save_artifact`` (raynb's own hidden files left out)."""
        for entry in sorted(path.iterdir()):
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                self._client.log_artifacts(run_id, str(entry), artifact_path=entry.name)
            else:
                self._client.log_artifact(run_id, str(entry))


__all__ = ["MLflowLoggerCallback", "setup_mlflow"]
