"""Reloading the user's own modules that changed between runs.

A warm worker imported the user's helper modules (``from mylib import Net``) in an
earlier run; when the user edits ``mylib.py`` in the notebook's directory, the
next run must see the edit, as a fresh process would. After each run the worker
notes the mtime of every user module (a ``.py`` outside the standard library,
site-packages and raynb itself); before the next run it reloads those whose file
changed.
"""
from __future__ import annotations

import importlib
import os
import sys
import sysconfig

_LIBRARY_ROOTS = tuple(
    os.path.realpath(p) + os.sep
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix,
              sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"],
              os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}
)


def is_user_module_file(path: str) -> bool:
    """A .py file the user may edit (not stdlib, site-packages or raynb itself)."""
    if not path.endswith(".py"):
        return False
    real = os.path.realpath(path)
    return not real.startswith(_LIBRARY_ROOTS)


class UserModules:
    """The user modules a worker imported, and their files' mtimes after the last run."""

    def __init__(self):
        self._files: dict[str, str | bool] = {}
        self._mtimes: dict[str, float] = {}

    def _file(self, name: str, mod) -> str | bool:
        known = self._files.get(name)
        if known is None:
            f = getattr(mod, "__file__", None)
            known = f if f and is_user_module_file(f) else False
            self._files[name] = known
        return known

    def note(self, run_started_ns: int) -> None:
        """Remember the mtime of user modules imported by the last run.

        A file modified since the run started (give or take the file system's
        timestamp granularity) may have been edited after the run imported it:
        it is marked to be reloaded before the next run.
        """
        recent = run_started_ns - 2_000_000_000
        for name, mod in list(sys.modules.items()):
            if name not in self._mtimes:
                f = self._file(name, mod)
                if f:
                    try:
                        mtime = os.stat(f).st_mtime_ns
                    except OSError:
                        continue
                    self._mtimes[name] = -1 if mtime >= recent else mtime

    def reload_changed(self) -> None:
        """Re-import user modules whose file changed since the last run."""
        for name, mtime in list(self._mtimes.items()):
            mod = sys.modules.get(name)
            f = self._files.get(name)
            if mod is None or not f:
                continue
            try:
                now = os.stat(f).st_mtime_ns
            except OSError:
                continue
            if now != mtime:
                importlib.reload(mod)
                self._mtimes[name] = now
