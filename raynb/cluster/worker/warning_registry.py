"""Python's once-per-location warnings on a warm worker, across its tasks.

Python shows a warning once per location (the ``"default"`` action) by recording it in
the ``__warningregistry__`` of the module whose code warned. A function shipped by
value (a notebook's or a script's, and what it calls from there) arrives with a fresh
globals dict at every task, so its registry started empty at every trial and a warning
in a Tune trainable printed once per trial, hundreds of times over an experiment. A
rank is one long-lived Python process, as a Ray actor is: :func:`keep_registries` gives
the shipped code's globals the registry this process kept for that code's module and
file, so a location warns once per worker process. A change of the warning filters
(``warnings.simplefilter`` ...) clears it, as Python does.

A re-run of the same code (a script run again, the same cell run again) on the same warm
worker does not show the warning again; a notebook cell edited and run again is new code
(IPython gives it a new file name) and does.
"""
from __future__ import annotations

import functools
import itertools
import sys
import types

# (the globals' __name__, the code's file name) -> the registry kept for them
_REGISTRIES: dict[tuple, dict] = {}
# How many objects of a payload are looked at for shipped functions, at most, and how
# many items of one container (a config's data is not walked: its functions come first).
MAX_OBJECTS = 2000
MAX_ITEMS = 100
_CONTAINERS = (list, tuple, set, frozenset)


def _shipped(g: dict) -> bool:
    """``g`` is the globals of code shipped by value (not an imported module's dict)."""
    mod = sys.modules.get(g.get("__name__") or "")
    return mod is None or getattr(mod, "__dict__", None) is not g


def _by_reference(cls: type) -> bool:
    """``cls`` is importable by name (so shipped by reference, its module's registry kept)."""
    mod = sys.modules.get(getattr(cls, "__module__", None) or "")
    return mod is not None and getattr(mod, cls.__qualname__, None) is cls


def _children(obj) -> list:
    """What of ``obj`` may lead to more shipped functions."""
    if isinstance(obj, types.FunctionType):
        out = [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
        out += [getattr(obj, "__wrapped__", None), *(obj.__defaults__ or ())]
        if _shipped(obj.__globals__):
            out += [v for v in obj.__globals__.values() if isinstance(v, (types.FunctionType, type))]
        return out
    if isinstance(obj, (types.MethodType, staticmethod, classmethod)):
        return [obj.__func__, getattr(obj, "__self__", None)]
    if isinstance(obj, functools.partial):
        return [obj.func, *obj.args, *obj.keywords.values()]
    if isinstance(obj, type):
        return [] if _by_reference(obj) else list(vars(obj).values())
    if isinstance(obj, dict):   # a large config: its first items only
        return list(itertools.islice(obj.values(), MAX_ITEMS))
    if isinstance(obj, _CONTAINERS):
        return list(itertools.islice(obj, MAX_ITEMS))
    state = getattr(obj, "__dict__", None)
    if isinstance(state, dict) and not isinstance(obj, types.ModuleType):
        return [type(obj), *state.values()]
    return []


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def keep_registries(root) -> int:
    """Give every function shipped by value in ``root`` (a task's function and config) the
    ``__warningregistry__`` this process keeps for its module and file.

    Returns:
        int: how many globals dicts were given one (for tests).
    """
    seen: set[int] = set()
    stack, given = [root], 0
    while stack and len(seen) < MAX_OBJECTS:
        obj = stack.pop()
        if obj is None or id(obj) in seen or isinstance(obj, (str, bytes, int, float)):
            continue
        seen.add(id(obj))
        if isinstance(obj, types.FunctionType) and _shipped(obj.__globals__):
            g = obj.__globals__
            if "__warningregistry__" not in g:
                key = (g.get("__name__"), obj.__code__.co_filename)
                g["__warningregistry__"] = _REGISTRIES.setdefault(key, {})
                given += 1
        stack.extend(_children(obj))
    return given
