"""A run's environment variables on a rank: Ray's ``runtime_env={"env_vars": ...}`` and
the driver's ``MLFLOW_*`` (``client/runtime_env.py`` puts them in the run's spec).

As Ray sets them when a worker starts, they are set before the run's function is
unpickled, so a module it imports reads them at import time, and (``os.environ`` calls
``putenv``) every subprocess the run starts inherits them. A warm worker serves other
runs next: each variable is put back as it was once the run's function ends.
"""

from __future__ import annotations

import os

_UNSET = None


class TaskEnv:
    """The variables one task set, and what they were before."""

    def __init__(self):
        self._saved: dict[str, str | None] = {}

    def set(self, env: dict | None) -> None:
        """Set ``env`` (str -> str; None or empty: nothing) for a task, putting back first
        what an earlier task set and did not restore."""
        self.restore()
        for name, value in (env or {}).items():
            self._saved[name] = os.environ.get(name, _UNSET)
            os.environ[name] = value

    def restore(self) -> None:
        """Each variable :meth:`set` set, as it was before (unset if it was)."""
        saved, self._saved = self._saved, {}
        for name, value in saved.items():
            if value is _UNSET:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
