"""MLflow tracking stores as Ray's integration takes them, safe for concurrent trials.

- :func:`tracking_uri`: a path (``./mlruns``, ``/tmp/mlruns``) or ``file:`` URI is a file
  store, made absolute so the driver and every rank mean the same directory; MLflow 3
  refuses file stores unless ``MLFLOW_ALLOW_FILE_STORE`` is set, so :func:`allowing_file_store`
  sets it for a store the user named (Ray's integration takes one).
- :func:`store_lock`: trials that start at once on one machine open the same store: a
  new sqlite database's tables were made twice (``duplicate column name: step``) and a
  file store's experiment twice. Opening the store and getting or creating the experiment
  happen under an exclusive file lock beside the store.
- :func:`experiment_id`: Ray's rules (an id wins over a name; create only if asked).

``mlflow`` is imported by the callers, not here.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

ALLOW_FILE_STORE = "MLFLOW_ALLOW_FILE_STORE"


def is_file_store(uri: str | None) -> bool:
    """``uri`` names a file store (a path, or ``file:``)."""
    return bool(uri) and (urlparse(uri).scheme in ("", "file") or (len(uri) > 1 and uri[1] == ":"))


def driver_dir() -> str:
    """The directory relative store paths mean: the driver's. A Tune trial runs in its trial
    directory (``tune.trial_working_dir``) and finds the driver's in ``$TUNE_ORIG_WORKING_DIR``;
    elsewhere the working directory is the driver's (or the notebook's, on a rank)."""
    return os.environ.get("TUNE_ORIG_WORKING_DIR") or os.getcwd()


def tracking_uri(uri: str | None, base: str | None = None) -> str | None:
    """``uri`` as the tracking URI every process reads alike: a file store's path made
    absolute (against ``base``, default :func:`driver_dir`) as a ``file://`` URI; other URIs
    (``sqlite:///``, ``http://``, ``databricks``) as given; None stays None."""
    if not uri:
        return uri
    if not is_file_store(uri):
        return uri
    path = urlparse(uri).path if uri.startswith("file:") else uri
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = Path(base or driver_dir()) / p
    return p.resolve().as_uri()


def _lock_path(uri: str) -> Path | None:
    """Where the lock of a local store lives (beside a sqlite file, inside a file store's
    directory); None for a server (it orders its own writes)."""
    u = urlparse(uri)
    if u.scheme == "sqlite" and uri.startswith("sqlite:///") and ":memory:" not in uri:
        db = uri[len("sqlite:///") :]
        return Path(db if db.startswith("/") else os.path.join(os.getcwd(), db)).with_name(
            Path(db).name + ".lock"
        )
    if u.scheme in ("", "file"):
        return Path(u.path if u.scheme else uri) / ".raynb-mlflow.lock"
    return None


@contextmanager
def store_lock(uri: str | None):
    """Hold an exclusive lock of the local store ``uri`` (no-op for a server)."""
    path = _lock_path(uri) if uri else None
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextmanager
def allowing_file_store(uri: str | None, keep: bool = False):
    """Let MLflow open the file store ``uri`` the user named (``MLFLOW_ALLOW_FILE_STORE``),
    restored after unless ``keep``."""
    if not is_file_store(uri) or os.environ.get(ALLOW_FILE_STORE):
        yield
        return
    os.environ[ALLOW_FILE_STORE] = "true"
    try:
        yield
    finally:
        if not keep:
            os.environ.pop(ALLOW_FILE_STORE, None)


def experiment_id(
    client,
    *,
    name: str | None,
    experiment_id: str | None = None,
    artifact_location: str | None = None,
    create: bool = True,
) -> str:
    """The MLflow experiment to log to, by Ray's rules: ``experiment_id`` (or
    ``$MLFLOW_EXPERIMENT_ID``) if it exists, else the experiment named ``name`` (or
    ``$MLFLOW_EXPERIMENT_NAME``), created if missing and ``create``. Call it under
    :func:`store_lock`.

    Raises:
        ValueError: no such experiment and ``create`` is False, or neither an id nor a name.
    """
    from mlflow.exceptions import MlflowException

    experiment_id = experiment_id or os.environ.get("MLFLOW_EXPERIMENT_ID")
    if experiment_id is not None:
        try:
            return client.get_experiment(experiment_id).experiment_id
        except MlflowException:
            pass
    name = name or os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if name:
        found = client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        if create:
            try:
                return client.create_experiment(name, artifact_location=artifact_location)
            except MlflowException:  # made meanwhile by a process on another machine
                found = client.get_experiment_by_name(name)
                if found is not None:
                    return found.experiment_id
                raise
    if not name:
        raise ValueError(
            f"MLflow: the experiment id {experiment_id!r} does not exist and no experiment "
            "name was given: pass experiment_name= (or set $MLFLOW_EXPERIMENT_NAME)"
        )
    raise ValueError(
        f"MLflow: no experiment named {name!r} (nor id {experiment_id!r}) in the tracking "
        "store, and create_experiment_if_not_exists=False: create it first, or pass "
        "create_experiment_if_not_exists=True"
    )
