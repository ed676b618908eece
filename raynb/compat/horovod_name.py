"""``import horovod.torch`` under the ``ray`` hook (``raynb run``, ``raynb.compat.install()``)
gives raynb's Horovod PyTorch API (``raynb.train.horovod.torch``) when the real Horovod is not
installed: Horovod's own examples import it at module level, in the driver, before any
``HorovodTrainer`` runs (inside a run's function, ``HorovodTrainer`` serves the name itself)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import types

NAMES = ("horovod", "horovod.torch")


def real_horovod_installed() -> bool:
    """Whether a ``horovod`` package is on the import path (located, not imported)."""
    return importlib.machinery.PathFinder.find_spec("horovod") is not None


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        if spec.name == "horovod":
            package = types.ModuleType("horovod", "Horovod's PyTorch API, served by raynb")
            package.__path__ = []  # a package: `horovod.torch` is found by the same hook
            package._raynb_served = True
            return package
        module = importlib.import_module("raynb.train.horovod.torch")
        self._own_spec = module.__spec__  # put back in exec_module: it stays raynb's module
        return module

    def exec_module(self, module):
        if module.__name__ != "horovod":
            module.__spec__ = self._own_spec


def find_spec(fullname: str) -> importlib.machinery.ModuleSpec | None:
    """The spec serving ``fullname`` (one of NAMES), or None where real Horovod is installed,
    and on a worker: there ``HorovodTrainer`` serves the name for its run only, so a warm worker
    the hook reached (a ``raynb run`` script's function) does not keep it for later runs."""
    if os.environ.get("RAYNB_WORKER_ID") or real_horovod_installed():
        return None
    return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=fullname == "horovod")
