"""What a task leaves in a library's process-wide state, put back after it.

Ray starts each training run in fresh worker processes; a warm raynb worker serves the next
run in the same process. Process environment is put back by ``task_env``; some libraries also
keep module globals a run's own code sets, which a fresh process would not have: MLflow's
tracking and registry URIs (``mlflow.set_tracking_uri``), its active experiment
(``mlflow.set_experiment``) and a run the function left open (a fresh process ends it at exit,
through MLflow's ``atexit`` hook). Without this, a later run on the same worker would log into
an earlier run's experiment or store. Only libraries already imported are touched.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger(__name__)

# module -> the globals of it a task may set, and that the next task must not see.
_MLFLOW_GLOBALS = (
    ("mlflow.tracking.fluent", "_active_experiment_id"),
    ("mlflow.tracking._tracking_service.utils", "_tracking_uri"),
    ("mlflow.tracking._model_registry.utils", "_registry_uri"),
)
# A task's status -> how MLflow names the end of a run the task left open.
_RUN_END = {"ok": "FINISHED", "cancelled": "KILLED"}


class LibraryState:
    """The MLflow globals before a task (:meth:`note`), put back after it (:meth:`restore`)."""

    def __init__(self):
        self._before: dict | None = None

    def note(self) -> None:
        """Note the globals as they are now (before a task's function is unpickled)."""
        self._before = {
            (module, name): getattr(sys.modules[module], name, None)
            for module, name in _MLFLOW_GLOBALS
            if module in sys.modules
        }

    def restore(self, status: str) -> None:
        """End an MLflow run the task left open (``status``: the task's, ``ok``, ``error`` or
        ``cancelled``), then put the globals back as :meth:`note` found them (a module the
        task imported first: as a fresh import has them, None)."""
        before, self._before = self._before or {}, None
        fluent = sys.modules.get("mlflow.tracking.fluent")
        if fluent is not None:
            _end_open_runs(fluent, _RUN_END.get(status, "FAILED"))
        for module, name in _MLFLOW_GLOBALS:
            loaded = sys.modules.get(module)
            if loaded is not None and hasattr(loaded, name):
                setattr(loaded, name, before.get((module, name)))


def _end_open_runs(fluent, end_status: str) -> None:
    try:
        while fluent.active_run() is not None:
            fluent.end_run(end_status)
    except Exception as exc:  # noqa: BLE001 - a store gone away must not take the worker with it
        log.warning("could not end the MLflow run the task left open: %s", exc)
