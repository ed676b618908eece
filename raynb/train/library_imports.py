"""What raynb does when a big library is imported on a warm worker: run code of its own
before and after the library's module body (``when_imported``: one ``sys.meta_path`` finder
that wraps the loaders of the modules named to it, PEP 451), and move what is alive then out
of the garbage collector's reach (``freeze_imported_objects``).

The framework guards (``lightning_guard``, ``tensorflow_guard``) and ``deepspeed_ranks`` act
through it on libraries raynb never imports itself; ``raynb.train.torch``, which the zygote
imports before it forks the workers, installs them, so every worker has them.
"""

from __future__ import annotations

import gc
import importlib.abc
import os
import sys
from typing import Callable

# module name -> its (before, after) hooks, in the order given
_HOOKS: dict[str, list[tuple[Callable[[], None] | None, Callable]]] = {}


def when_imported(name: str, after: Callable, before: Callable[[], None] | None = None) -> None:
    """Call ``after(module)`` once module ``name`` has run its body (at once when it is
    imported already), and ``before()`` just before its body runs. Idempotent: the same
    functions given again are not added twice."""
    hooks = _HOOKS.setdefault(name, [])
    if (before, after) not in hooks:
        hooks.append((before, after))
        module = sys.modules.get(name)
        if module is not None:
            after(module)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


class _Finder(importlib.abc.MetaPathFinder):
    """Finds a hooked module with the finders after it, and wraps the loader they give."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _HOOKS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, name: str):
        self.loader, self.name = loader, name

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        hooks = list(_HOOKS.get(self.name, ()))
        for before, _ in hooks:
            if before is not None:
                before()
        self.loader.exec_module(module)
        for _, after in hooks:
            after(module)


def in_worker() -> bool:
    """Whether this process is a raynb worker (a rank's process)."""
    return bool(os.environ.get("RAYNB_WORKER_ID"))


_FROZEN = [False]


def freeze_imported_objects() -> None:
    """In a worker, once per process: move the objects alive now (a library's modules,
    classes, functions: they live as long as the warm worker) out of the garbage collector's
    reach (``gc.freeze()``). A library that runs a full ``gc.collect()`` on every fit (the
    Transformers Trainer's start, ZeRO-3's ``initialize``) would otherwise walk all of them
    on every warm re-run. Outside a worker nothing is done."""
    if _FROZEN[0] or not in_worker():
        return
    gc.collect()  # what is garbage now is freed, not frozen
    gc.freeze()
    _FROZEN[0] = True
