"""Refusing, before anything is sent, a function that would call real Ray's ``ray.train``,
``ray.tune``, ``ray.data`` or ``ray.air`` on a raynb rank.

Ray's own ``ray.train.report`` (or ``import ray.train.torch``) on a raynb rank fails there,
after the run was submitted, with Ray's message about a session raynb never made. This
check reads the function's code (and that of the functions and classes it reaches that
are shipped by value) for real Ray: a global or closure value that is one of those modules
or comes from one, ``ray.train`` reached through a global ``ray``, and an import of them
inside the function; it names the module and the line, and the fix.

Real Ray is told by where a module's file lives: inside an installed ``ray`` package, not
inside raynb. Modules that raynb serves under Ray's names (``raynb run``'s import hook)
are raynb's, and pass.
"""

from __future__ import annotations

import dis
import os
import sys
import types

from ..errors import user_traceback

# Ray's libraries that raynb serves under its own names.
SERVED = ("train", "tune", "data", "air")
_RAYNB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
MAX_DEPTH = 4


class RealRayError(ImportError):
    """A training function uses real Ray's ``ray.train`` / ``ray.tune`` / ``ray.data`` /
    ``ray.air``, which cannot run on raynb's ranks.

    Attributes:
        module (str): the Ray module, e.g. ``"ray.train"``.
        where (str): ``file:line`` of the code that uses it.
    """

    def __init__(self, module: str, where: str, what: str):
        self.module, self.where = module, where
        lib = module.split(".")[1] if "." in module else "train"
        super().__init__(
            f"{where}: {what} uses real Ray's {module}, which does not run on raynb's workers "
            f"(Ray's functions there fail after the run is sent). Use raynb's: "
            f"`import raynb.{lib} as {lib}` (or `from raynb import {lib}`) in place of Ray's, or "
            "run the script unchanged with `raynb run SCRIPT`, which serves `ray.*` from raynb."
        )

    def _render_traceback_(self) -> list[str]:
        return user_traceback(self)


def _real_file(module) -> bool:
    f = getattr(module, "__file__", None)
    return (
        bool(f)
        and not os.path.abspath(f).startswith(_RAYNB_DIR)
        and (f"{os.sep}ray{os.sep}" in os.path.abspath(f))
    )


def _served_name(name: str) -> str | None:
    """``ray.train`` for ``ray.train.torch`` (a name of Ray's served libraries), else None."""
    parts = name.split(".")
    return f"ray.{parts[1]}" if len(parts) > 1 and parts[0] == "ray" and parts[1] in SERVED else None


def _real_module_of(value) -> str | None:
    """The real Ray library ``value`` is, or comes from, e.g. ``"ray.tune"``; else None."""
    if isinstance(value, types.ModuleType):
        name = getattr(value, "__name__", "")
        if _hook_active() and name.split(".")[2:3] == ["examples"]:
            return None  # one of Ray's shipped examples, run under the hook
        return _served_name(name) if _real_file(value) else None
    owner = (
        getattr(value, "__module__", None)
        if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType))
        else getattr(type(value), "__module__", None)
    )
    lib = _served_name(owner) if isinstance(owner, str) else None
    if lib and _hook_active() and owner.split(".")[2:3] == ["examples"]:
        return None  # Ray's shipped examples, read from the wheel and run under the hook
    return lib if lib and _real_file(sys.modules.get(owner)) else None


def _hook_active() -> bool:
    """raynb serves ``ray.*`` in this process: ``raynb.compat``'s finder is installed (other
    finders of raynb's, such as the Lightning guard, serve other names)."""
    return any(type(f).__module__ == "raynb.compat.ray_shim" for f in sys.meta_path)


def _where(code: types.CodeType, lineno) -> str:
    return f"{code.co_filename}:{lineno or code.co_firstlineno}"


def _code_objects(code: types.CodeType):
    stack = [code]
    while stack:
        co = stack.pop()
        yield co
        stack.extend(c for c in co.co_consts if isinstance(c, types.CodeType))


def _flagged(values: dict) -> tuple[dict, set]:
    """(name -> real Ray library of the values that are or come from one, names bound to
    the real ``ray`` package itself)."""
    libs, packages = {}, set()
    for name, value in values.items():
        if isinstance(value, types.ModuleType) and getattr(value, "__name__", None) == "ray":
            if _real_file(value):
                packages.add(name)
            continue
        lib = _real_module_of(value)
        if lib:
            libs[name] = lib
    return libs, packages


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _mentions_ray(co: types.CodeType) -> bool:
    return any(n == "ray" or n.startswith("ray.") for n in co.co_names)


def _scan_code(code: types.CodeType, libs: dict, packages: set, imports: bool):
    """(module, where, what) of the first use of real Ray in ``code``, or None."""
    loads = ("LOAD_GLOBAL", "LOAD_DEREF", "LOAD_NAME", "LOAD_CLASSDEREF")
    for co in _code_objects(code):
        names = set(co.co_names).union(co.co_freevars, co.co_cellvars)
        if not ((imports and _mentions_ray(co)) or names & (libs.keys() | packages)):
            continue
        line, imported, last = None, None, None
        for ins in dis.get_instructions(co):
            line = (ins.positions.lineno if ins.positions else None) or line
            op, arg = ins.opname, ins.argval
            if imports and op == "IMPORT_NAME":
                imported = arg
                if _served_name(arg):
                    return _served_name(arg), _where(co, line), f"`import {arg}`"
            elif imports and op == "IMPORT_FROM" and imported == "ray" and arg in SERVED:
                return f"ray.{arg}", _where(co, line), f"`from ray import {arg}`"
            elif op in loads and arg in libs:
                return libs[arg], _where(co, line), f"`{arg}`"
            elif op in ("LOAD_ATTR", "LOAD_METHOD") and last in packages and arg in SERVED:
                return f"ray.{arg}", _where(co, line), f"`{last}.{arg}`"
            last = arg if op in loads else None
    return None


def _inner_functions(value) -> list:
    """The functions that run when ``value`` does: itself, what it wraps, a partial's,
    a by-value class's methods."""
    if isinstance(value, types.MethodType):
        value = value.__func__
    if isinstance(value, types.FunctionType):
        return [value]
    wrapped = getattr(value, "__wrapped__", None) or getattr(value, "func", None)
    if wrapped is not None and wrapped is not value:
        return _inner_functions(wrapped)
    if isinstance(value, type) and value.__module__ == "__main__":
        return [v for v in vars(value).values() if isinstance(v, types.FunctionType)]
    return []


def refuse_real_ray(fn, referenced) -> None:
    """Raise :class:`RealRayError` if ``fn``, or a function it reaches that is shipped by
    value, uses real Ray's ``ray.train`` / ``ray.tune`` / ``ray.data`` / ``ray.air``.

    Args:
        fn: the training function (a function, a partial, a callable class).
        referenced: ``referenced(function) -> dict`` of the globals and closure values a
            function reads (``shipping._referenced_globals``).

    Raises:
        RealRayError: naming the module, the file and line, and the fix.
    """
    imports = not _hook_active()
    todo = [(f, 0) for f in _inner_functions(fn)]
    seen: set[int] = set()
    while todo:
        f, depth = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        if (f.__module__ or "").startswith("raynb."):  # raynb's wrapper: what it wraps
            inner = [c.cell_contents for c in f.__closure__ or () if _filled(c)]
            todo.extend(
                (g, depth) for v in [*inner, getattr(f, "__wrapped__", None)] for g in _inner_functions(v)
            )
            continue
        values = referenced(f)
        libs, packages = _flagged(values)
        found = _scan_code(f.__code__, libs, packages, imports)
        if found is not None:
            raise RealRayError(found[0], found[1], f"{f.__qualname__} ({found[2]})")
        if depth < MAX_DEPTH:
            for v in values.values():
                if getattr(v, "__module__", None) == "__main__" or (
                    isinstance(v, types.FunctionType) and v.__globals__ is f.__globals__
                ):
                    todo.extend((g, depth + 1) for g in _inner_functions(v))
