"""A run's environment variables on a rank: Ray's ``runtime_env={"env_vars": ...}`` and
the driver's ``MLFLOW_*`` (``client/runtime_env.py`` puts them in the run's spec).

As Ray sets them when a worker starts, they are set before the run's function is
unpickled, so a module it imports reads them at import time, and (``os.environ`` calls
``putenv``) every subprocess the run starts inherits them. A warm worker serves other
runs next: once the run's function ends, the process's environment is put back as it was
before the task, both what raynb set and what the run's own code set (``mlflow.set_tracking_uri``
sets ``MLFLOW_TRACKING_URI``), as a fresh Ray actor would start the next run clean. The
variables the worker sets for every task (``RANK`` ...) are left to it.
"""

from __future__ import annotations

import os


def _environ_bytes() -> dict:
    """The environment as ``os.environ`` holds it (its bytes dict: one C-level copy)."""
    data = getattr(os.environ, "_data", None)
    return dict(data) if isinstance(data, dict) else {k.encode(): v.encode() for k, v in os.environ.items()}


class TaskEnv:
    """The process's environment before a task, put back after it.

    ``keep``: names the worker sets for every task itself (``RANK`` ...), never put back.
    """

    def __init__(self, keep=()):
        self._keep = {name.encode() for name in keep}
        self._before: dict | None = None

    def set(self, env: dict | None) -> None:
        """Note the environment as it is, then set ``env`` (str -> str; None or empty:
        nothing) for a task, putting back first what an earlier task left."""
        self.restore()
        self._before = _environ_bytes()
        for name, value in (env or {}).items():
            os.environ[name] = value

    def restore(self) -> None:
        """The environment as it was at :meth:`set` (the names in ``keep`` aside)."""
        before, self._before = self._before, None
        if before is None:
            return
        now = _environ_bytes()
        if now == before:
            return
        for name in now.keys() - before.keys() - self._keep:
            os.environ.pop(os.fsdecode(name), None)
        for name, value in before.items():
            if name not in self._keep and now.get(name) != value:
                os.environ[os.fsdecode(name)] = os.fsdecode(value)
