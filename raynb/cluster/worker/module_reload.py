"""Reloading the user's own modules that changed between runs.

A warm worker imported the user's helper modules (``from mylib import Net``) in an
earlier run; when the user edits ``mylib.py`` in the notebook's directory, the
next run must see the edit, as a fresh process would. After each run the worker
notes the mtime of every user module (a ``.py`` outside the standard library,
site-packages and raynb itself); before the next run it reloads those whose file
changed.

What it costs per run: a worker holds thousands of modules (the zygote preloads torch),
and looking at each after every run would sit on every run's path. So it looks again only
when ``sys.modules`` changed (its length or its newest entry), then only at the modules
imported since (a set difference), and the zygote takes its first look before it forks
(:func:`warm`), so a worker starts with the preloaded ones known. Before a run, only the
user modules' files are stat'ed (a handful).
"""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
import time

_LIBRARY_ROOTS = tuple(
    os.path.realpath(p) + os.sep
    for p in {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["stdlib"],
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    }
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
        self._seen: set[str] = set()  # module names classified (user or not) already
        self._count, self._newest = -1, None  # len(sys.modules) and its newest name at the last look

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
        modules = sys.modules
        newest = next(reversed(modules), None)  # dicts keep insertion order: the last import
        if len(modules) == self._count and newest == self._newest:
            return  # nothing imported since the last look (the usual case)
        self._count, self._newest = len(modules), newest
        new = modules.keys() - self._seen
        if not new:
            return
        for name in new:
            mod = modules.get(name)
            if mod is None:
                continue
            f = self._file(name, mod)
            if f:
                try:
                    mtime = os.stat(f).st_mtime_ns
                except OSError:
                    continue  # looked at again after the next run
                self._mtimes[name] = -1 if mtime >= recent else mtime
            self._seen.add(name)

    def reload_changed(self) -> None:
        """Re-import user modules whose file changed since the last run."""
        for name, mtime in list(self._mtimes.items()):
            mod = sys.modules.get(name)
            f = self._files.get(name)
            if mod is None or not f:
                if mod is None:  # removed from sys.modules: looked at afresh if imported again
                    self._seen.discard(name)
                    del self._mtimes[name]
                continue
            try:
                now = os.stat(f).st_mtime_ns
            except OSError:
                continue
            if now != mtime:
                try:
                    importlib.reload(mod)
                except ModuleNotFoundError as e:
                    if e.name != name:
                        raise
                    # Loaded from a file no finder knows (TensorFlow's autograph writes its
                    # converted functions to temporary files): not the user's, never reloaded.
                    del self._mtimes[name]
                    self._files[name] = False
                    continue
                self._mtimes[name] = now


_warm: UserModules | None = None


def warm() -> None:
    """Classify the modules imported so far (the zygote, before it forks: its workers
    inherit the result, see :func:`user_modules`)."""
    global _warm
    _warm = UserModules()
    _warm.note(time.time_ns())


def user_modules() -> UserModules:
    """The tracker a worker uses: the zygote's warmed one, else a fresh one."""
    return _warm if _warm is not None else UserModules()
