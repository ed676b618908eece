"""Turning a training function and what it reads into bytes for the workers.

cloudpickle ships notebook-defined functions and classes by value and library
ones by reference. When that fails, the user needs the *name* of the variable
that cannot travel, not a pickling stack trace, and must learn it before
anything is sent.
"""

from __future__ import annotations

import io
import linecache
import os
import sys
import types
from collections import ChainMap

import cloudpickle

from ..errors import user_traceback
from . import bulk
from .real_ray import refuse_real_ray


class UnpicklableError(TypeError):
    """A value the training function needs cannot be sent to the workers.

    Attributes:
        name (str): the variable, e.g. ``"log_file"`` or ``"helper -> lock"``.
        reason (str): why pickling it failed.
    """

    def __init__(self, name: str, value, reason: str):
        self.name, self.reason = name, reason
        super().__init__(
            f"cannot send variable {name!r} ({type(value).__module__}.{type(value).__qualname__}) "
            f"to the workers: {reason}. Create it inside the training function (it then runs on "
            "each worker), or pass something picklable (a path instead of an open file, a list "
            "instead of a generator)."
        )

    def _render_traceback_(self) -> list[str]:
        """What IPython shows: the user's cell and the message, no pickling internals."""
        return user_traceback(self)


def _referenced_globals(fn: types.FunctionType) -> dict:
    """Globals and closure values that ``fn`` reads (what cloudpickle would ship)."""
    out = {}
    code_objs = [fn.__code__]
    names = set()
    while code_objs:
        co = code_objs.pop()
        names.update(co.co_names)
        code_objs.extend(c for c in co.co_consts if isinstance(c, types.CodeType))
    for n in names:
        if n in fn.__globals__:
            out[n] = fn.__globals__[n]
    for n, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            out[n] = cell.cell_contents
        except ValueError:
            pass
    return out


def find_unpicklable(values: dict, _prefix: str = "", _depth: int = 0, _seen=None):
    """The first (name, value, reason) in ``values`` that cloudpickle refuses, or None.

    Descends into functions defined in the notebook, so ``helper -> lock`` is
    reported rather than just ``helper``.
    """
    _seen = set() if _seen is None else _seen
    for name, value in values.items():
        if isinstance(value, types.ModuleType) or id(value) in _seen:
            continue
        _seen.add(id(value))
        try:
            cloudpickle.dumps(value)
            continue
        except Exception as e:  # noqa: BLE001 - any pickling failure is reported the same way
            reason = f"{type(e).__name__}: {e}"
        if isinstance(value, types.FunctionType) and _depth < 4:
            inner = find_unpicklable(_referenced_globals(value), f"{_prefix}{name} -> ", _depth + 1, _seen)
            if inner is not None:
                return inner
        return f"{_prefix}{name}", value, reason
    return None


def notebook_sources() -> dict:
    """Source text of notebook cells in ``linecache``: the entries with no modification
    time, which ``linecache.checkcache`` never drops because no file is behind them
    (IPython's ``CachingCompiler.cache`` makes them so for every cell since IPython 8.6),
    and, in ``maybe``, the entries with one (a file's, or a cell of an older IPython).

    Sent along so remote tracebacks show the lines of functions defined in other cells.
    (Not by a stat of every file name ``linecache`` holds, every module a traceback or
    ``inspect`` read, at every ``fit()``: only the few whose code a payload carries are
    looked for on disk, when it is pickled.)

    Returns:
        CellSources: filename -> the cell's lines (a list of str; joined when pickled).
    """
    out = CellSources()
    for filename, entry in dict(linecache.cache).items():  # a copy: other threads import too
        if len(entry) == 4 and entry[2]:
            (out if entry[1] is None else out.maybe)[filename] = entry[2]
    return out


_DIRS_SEEN: set[str] = set()  # sys.path entries found to be directories (see sys_path_dirs)


def sys_path_dirs() -> list[str]:
    """The entries of ``sys.path`` that are directories: the workers add them to theirs, so
    they import what the notebook imports. One found once is not stat-ed again at every
    ``fit()`` (one stat per entry): a worker checks each path before adding it, and checks
    again at its next task while one is missing (``Worker._prepare``)."""
    out = []
    for p in sys.path:
        if p in _DIRS_SEEN:
            out.append(p)
        elif p and os.path.isdir(p):
            _DIRS_SEEN.add(p)
            out.append(p)
    return out


def _rebuild_code(ctor, args, filename: str) -> types.CodeType:
    return ctor(*args).replace(co_filename=filename)


def _reduce_code(code: types.CodeType):
    # cloudpickle blanks co_filename ("<dynamic-code>"); remote tracebacks need it
    # to name the cell and show its lines, so it is put back on arrival.
    ctor, args = cloudpickle.cloudpickle._code_reduce(code)
    return _rebuild_code, (ctor, args, code.co_filename)


class CellSources(dict):
    """filename -> source of notebook cells (text, or its lines), pickled (by :class:`_Pickler`,
    after the function it travels with) as the text of the cells whose code the payload
    carries, the only ones a remote traceback can show: the whole notebook's cells, every
    version of each cell run so far, travelled with every fit, and grew with the session."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.maybe: dict = {}  # filename -> lines of entries with an mtime: a cell if no file is there

    def shipped(self, code_files: set):
        out = [(k, v if isinstance(v, str) else "".join(v)) for k, v in self.items() if k in code_files]
        out += [
            (k, "".join(v))
            for k, v in self.maybe.items()
            if k in code_files and k not in self and not os.path.exists(k)
        ]
        return iter(out)


class _Pickler(cloudpickle.CloudPickler):
    if hasattr(cloudpickle.cloudpickle, "_code_reduce"):
        dispatch_table = ChainMap({types.CodeType: _reduce_code}, cloudpickle.CloudPickler.dispatch_table)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.code_files: set[str] = set()  # the co_filename of every code object pickled

    def reducer_override(self, obj):
        cls = type(obj)
        if cls is types.CodeType:
            self.code_files.add(obj.co_filename)  # then pickled by the dispatch table's _reduce_code
        elif cls is CellSources:
            return dict, (), None, None, obj.shipped(self.code_files)
        # A large array or tensor goes once per node into shared memory (client.bulk),
        # while build_submission pickles a run's payload; anything else as cloudpickle does.
        big = bulk.reduce_large(obj)
        return big if big is not None else super().reducer_override(obj)


def dumps(obj) -> bytes:
    """cloudpickle.dumps (protocol 5) that keeps code objects' filenames."""
    buf = io.BytesIO()
    _Pickler(buf, protocol=5).dump(obj)
    return buf.getvalue()


# Objects a worker unpickles before a run's function: raynb.compat adds its import hook here
# so that ``import ray`` inside a function shipped from `raynb run` resolves to raynb there too.
payload_preludes: list = []


def dumps_payload(fn, config, sources: dict | None = None, captured: dict | None = None) -> bytes:
    """cloudpickle (protocol 5) of what a worker needs to run ``fn(config)``.

    Args:
        fn: the training function (``f()`` or ``f(config)``).
        config: its ``train_loop_config`` (any picklable value).
        sources: filename -> source text, registered in the workers' linecache: those of
            the code the payload carries (``CellSources``).
        captured: for error messages only: the notebook variables ``fn`` reads.

    Raises:
        UnpicklableError: naming the variable that cannot be sent, and why.
        RealRayError: ``fn`` uses real Ray's ``ray.train`` / ``tune`` / ``data`` / ``air``.
        MemoryError: in-memory data has no room in shared memory (``shm.SharedMemoryFull``).
    """
    refuse_real_ray(fn, _referenced_globals)  # Ray's own ray.train on a rank fails only there
    cells = sources if isinstance(sources, CellSources) else CellSources(sources or {})
    payload = {"fn": fn, "config": config, "sources": cells}  # last: see CellSources
    if payload_preludes:  # first: unpickled before fn
        payload = {"preludes": tuple(payload_preludes), **payload}
    try:
        return dumps(payload)
    except MemoryError:
        raise  # no room for the data (shm.SharedMemoryFull names /dev/shm): not a pickling matter
    except Exception as e:  # noqa: BLE001
        suspects = dict(captured or {})
        if not isinstance(fn, types.FunctionType):  # a profiled run's function (raynb.train.profiling)
            fn = getattr(fn, "__wrapped__", fn)
        if isinstance(fn, types.FunctionType):
            suspects.update(_referenced_globals(fn))
        suspects["config"] = config
        found = find_unpicklable(suspects)
        if found is None:
            found = (getattr(fn, "__name__", "the training function"), fn, f"{type(e).__name__}: {e}")
        raise UnpicklableError(*found) from None
