"""MLflow from inside a training function: :func:`setup_mlflow`
(``ray.air.integrations.mlflow.setup_mlflow``).

``mlflow`` is imported only when it is called, on the rank that logs.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..cluster.worker import task_context
from . import mlflow_store, session
from .experiment_callback import flatten

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


# The keys of ``config["mlflow"]`` that setup_mlflow reads (its own arguments' names).
MLFLOW_CONFIG_KEYS = (
    "tracking_uri",
    "registry_uri",
    "experiment_id",
    "experiment_name",
    "tracking_token",
    "artifact_location",
    "run_name",
    "create_experiment_if_not_exists",
    "tags",
    "rank_zero_only",
)
# A Tune experiment's directory holds one of these (a trial's run directory is inside it).
_TUNE_FILES = ("experiment_state.json", "tuner.pkl")


def _settings(config: dict | None, given: dict) -> dict:
    """The arguments given, else ``config["mlflow"]``'s (Ray's older ``mlflow`` config key)."""
    from_config = (config or {}).get("mlflow") if isinstance(config, dict) else None
    if from_config is not None and not isinstance(from_config, dict):
        raise TypeError(
            f"setup_mlflow: config['mlflow'] must be a dict of {', '.join(MLFLOW_CONFIG_KEYS)}; "
            f"got {type(from_config).__name__}"
        )
    unknown = sorted(set(from_config or {}) - set(MLFLOW_CONFIG_KEYS))
    if unknown:
        raise ValueError(
            f"setup_mlflow: config['mlflow'] has {unknown}, which setup_mlflow does not take; "
            f"its keys: {', '.join(MLFLOW_CONFIG_KEYS)}"
        )
    return {
        k: given[k] if given.get(k) is not None else (from_config or {}).get(k) for k in MLFLOW_CONFIG_KEYS
    }


def _default_store(task: dict) -> str:
    """The experiment's own store: ``mlflow.db`` in the run directory's parent (a Tune
    experiment's directory, or the storage path of a ``fit()``), never a working directory
    that concurrent trials share."""
    parent = Path(task["path"]).parent
    if not parent.is_dir():  # this node does not mount the head's storage
        parent = Path.home() / "raynb_results"
        parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{parent / 'mlflow.db'}"


def _default_experiment(task: dict) -> str:
    parent = Path(task["path"]).parent
    return parent.name if any((parent / f).exists() for f in _TUNE_FILES) else task["name"]


_ENV = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_TRACKING_TOKEN", mlflow_store.ALLOW_FILE_STORE)


def _saved_state():
    """A function that puts back MLflow's tracking and registry URIs and its variables as
    they are now (``mlflow.set_tracking_uri`` also sets ``$MLFLOW_TRACKING_URI``)."""
    from mlflow.tracking._model_registry import utils as registry
    from mlflow.tracking._tracking_service import utils as tracking

    uris = (getattr(tracking, "_tracking_uri", None), getattr(registry, "_registry_uri", None))
    env = {k: os.environ.get(k) for k in _ENV}

    def restore() -> None:
        tracking.set_tracking_uri(uris[0])
        registry.set_registry_uri(uris[1])
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    return restore


def setup_mlflow(
    config: dict | None = None,
    tracking_uri: str | None = None,
    registry_uri: str | None = None,
    experiment_id: str | None = None,
    experiment_name: str | None = None,
    tracking_token: str | None = None,
    artifact_location: str | None = None,
    run_name: str | None = None,
    create_experiment_if_not_exists: bool | None = None,
    tags: dict | None = None,
    rank_zero_only: bool = True,
):
    """Start an MLflow run for this training run or trial, from inside the training function
    (``ray.air.integrations.mlflow.setup_mlflow``, the same arguments).

    On rank 0 (every rank with ``rank_zero_only=False``) it sets the tracking URI, finds
    or creates the experiment, starts a run, logs ``config`` as its params (without its
    ``"mlflow"`` key) and returns the ``mlflow`` module, so ``mlflow.log_metric(...)`` logs
    to that run. The run ends when the training function ends: FINISHED, FAILED if it
    raised, KILLED if cancelled (the warm worker lives on, so raynb ends it and puts the
    tracking URI back). The other ranks get a stand-in whose every function does nothing.

    Each argument left None is read from ``config["mlflow"]`` (a dict with these names, as
    Ray's older integration read it), then from MLflow's variables (``$MLFLOW_TRACKING_URI``,
    ``$MLFLOW_EXPERIMENT_NAME``, ``$MLFLOW_EXPERIMENT_ID``).

    Args:
        config (dict | None): logged as the run's params (nested keys as ``a/b``).
        tracking_uri (str | None): ``"sqlite:///path.db"``, ``"http://host:5000"``, or a
            file store (``"./mlruns"``, ``"file:///tmp/mlruns"``; a relative path is the
            notebook's working directory, where the ranks run). None and no
            ``$MLFLOW_TRACKING_URI``: the experiment's own store, ``mlflow.db`` in the
            parent of the run directory (a Tune experiment's directory, or the
            ``storage_path`` of a ``fit()``); never one shared working directory.
        registry_uri (str | None): MLflow's model registry.
        experiment_id (str | None): an existing experiment; wins over the name.
        experiment_name (str | None): default: the Tune experiment's name for a trial,
            else this run's name.
        tracking_token (str | None): set as ``$MLFLOW_TRACKING_TOKEN`` during the run.
        artifact_location (str | None): for an experiment this creates.
        run_name (str | None): default: this run's (trial's) name.
        create_experiment_if_not_exists (bool | None): None (raynb's default): create a
            missing experiment; False: raise, as Ray's default does.
        tags (dict | None): set on the run.
        rank_zero_only (bool): log from rank 0 only (the default).

    Returns:
        The ``mlflow`` module, or the do-nothing stand-in.

    Raises:
        RuntimeError: called outside a training function.
        ImportError: ``mlflow`` is not installed on the workers.
        ValueError: no such experiment and ``create_experiment_if_not_exists=False``;
            ``config["mlflow"]`` holds a key setup_mlflow does not take.
    """
    task = session._require("setup_mlflow")
    s = _settings(config, dict(locals()))
    if (s["rank_zero_only"] is not False) and task["rank"] != 0:
        return _NoopModule()
    try:
        import mlflow
    except ImportError as e:
        raise ImportError(
            f"setup_mlflow() needs mlflow on the workers ({e}): pip install mlflow-skinny "
            "(or pip install 'raynb[tracking]')"
        ) from None
    return _start(mlflow, task, s, {k: v for k, v in (config or {}).items() if k != "mlflow"})


def _start(mlflow, task: dict, s: dict, params: dict):
    from mlflow.tracking import MlflowClient

    uri = mlflow_store.tracking_uri(
        s["tracking_uri"] or os.environ.get("MLFLOW_TRACKING_URI")
    ) or _default_store(task)
    restore = _saved_state()
    if s["tracking_token"]:
        os.environ["MLFLOW_TRACKING_TOKEN"] = s["tracking_token"]
    if mlflow_store.is_file_store(uri):
        os.environ[mlflow_store.ALLOW_FILE_STORE] = "true"  # a store the user named; put back at the end

    def end(status: str) -> None:
        try:
            if mlflow.active_run() is not None:
                mlflow.end_run(_END_STATUS.get(status, "FAILED"))
        finally:  # the next task on this warm worker starts from the same defaults
            restore()

    task_context.at_end(end)
    mlflow.set_tracking_uri(uri)
    if s["registry_uri"]:
        mlflow.set_registry_uri(s["registry_uri"])
    with mlflow_store.store_lock(uri):  # trials starting at once open one store
        exp_id = mlflow_store.experiment_id(
            MlflowClient(uri, registry_uri=s["registry_uri"]),
            name=s["experiment_name"]
            or (None if os.environ.get("MLFLOW_EXPERIMENT_NAME") else _default_experiment(task)),
            experiment_id=s["experiment_id"],
            artifact_location=s["artifact_location"],
            create=s["create_experiment_if_not_exists"] is not False,
        )
    if mlflow.active_run() is not None:  # left by code of an earlier task on this warm worker
        mlflow.end_run("KILLED")
    mlflow.start_run(experiment_id=exp_id, run_name=s["run_name"] or task["name"], tags=s["tags"])
    if params:
        mlflow.log_params(mlflow_params(params))
    return mlflow
