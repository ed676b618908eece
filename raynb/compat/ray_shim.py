"""The import hook that serves ``ray`` and ``ray.X.Y`` from ``raynb`` and ``raynb.X.Y``.

Each served module is a thin proxy (:class:`ServedModule`) over raynb's module: its names are
raynb's own objects, a name raynb lacks raises ``AttributeError`` naming it and where to go,
and the proxy pickles as raynb's module, so a training function whose globals hold
``ray.train`` unpickles on a worker that never installed the hook. A worker that runs a
function shipped from a process with the hook installs it too (``client.shipping``'s
``payload_preludes``), so ``import ray.train`` inside the function resolves there as well.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

from . import horovod_name

DOCS = "docs/coming-from-ray.md"
ON_RAY = "run the script on Ray itself (`raynb start --ray` shares a Ray cluster with raynb), or see " + DOCS
RAY_API_VERSION = "2.60.0"  # the Ray release whose API names raynb follows


def not_served_message(what: str) -> str:
    return f"{what} is not served by raynb (it serves Ray Train, Tune, Data and AIR): {_hint(what)}{ON_RAY}"


def _hint(what: str) -> str:
    """What to import instead, where raynb serves it under another name."""
    parts = what.strip("`").split(".")
    if parts[:3] == ["ray", "train", "v2"]:
        return (
            "import Ray Train v2's public names from `ray.train` "
            "(`from ray.train import RunConfig, UserCallback`), or "
        )
    private = next((i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")), None)
    if private:
        inner, public = ".".join(parts[: private + 1]), ".".join(parts[:private])
        return f"`{inner}` is Ray's internals: use the public names of `{public}`, or "
    return ""


class ServedModule(types.ModuleType):
    """``ray[.X.Y]`` as seen by a script: raynb's module ``raynb[.X.Y]`` under Ray's name."""

    def __init__(self, ray_name: str, target: types.ModuleType):
        super().__init__(ray_name, getattr(target, "__doc__", None))
        self.__dict__["_raynb_target"] = target
        # Submodules come from the finder; a plain module gets a path too, so `from
        # ray.x.y import Missing` asks the finder for `ray.x.y.Missing`, whose error names
        # what is not served (not only "cannot import name ... (unknown location)").
        self.__dict__["__path__"] = []

    def __getattr__(self, name: str):
        target = self.__dict__["_raynb_target"]
        try:
            value = getattr(target, name)
        except AttributeError:
            if name.startswith("__") and name.endswith("__"):
                raise
            value = _submodule(target, name)  # `ray.tune` after a bare `import ray`
            if value is None:
                raise AttributeError(
                    not_served_message(f"`{self.__name__}.{name}`"), name=name, obj=self
                ) from None
        if isinstance(value, types.ModuleType) and value.__name__ == f"{target.__name__}.{name}":
            # A submodule reached as an attribute (`ray.train.torch` after `import ray`) is
            # served too, so its missing names say so as well.
            sub = f"{self.__name__}.{name}"
            value = importlib.import_module(sub) if installed() else _make(sub, value)
            self.__dict__[name] = value
        return value

    def __repr__(self):
        return f"<module {self.__name__!r} (served by {self.__dict__['_raynb_target'].__name__})>"

    def __dir__(self):
        return sorted(set(dir(self.__dict__["_raynb_target"])) | set(self.__dict__))

    def __reduce_ex__(self, protocol):
        # Pickled by reference to raynb's module, rebuilt as a proxy where it is unpickled.
        return served_module, (self.__name__,)


def _submodule(target: types.ModuleType, name: str) -> types.ModuleType | None:
    """raynb's submodule ``target.name`` imported, or None when raynb has none."""
    if not hasattr(target, "__path__"):
        return None
    try:
        found = importlib.util.find_spec(f"{target.__name__}.{name}") is not None
    except (ImportError, ValueError):
        found = False
    return importlib.import_module(f"{target.__name__}.{name}") if found else None


def raynb_name(ray_name: str) -> str:
    return "raynb" + ray_name[3:]


def served_module(ray_name: str) -> ServedModule:
    """The proxy for ``ray_name`` (``ray`` or ``ray.X.Y``): the one in ``sys.modules`` when
    the hook serves it there, else a new one over ``raynb.X.Y``."""
    mod = sys.modules.get(ray_name)
    if isinstance(mod, ServedModule):
        return mod
    return _make(ray_name, importlib.import_module(raynb_name(ray_name)))


def _make(ray_name: str, target: types.ModuleType) -> ServedModule:
    mod = ServedModule(ray_name, target)
    if ray_name == "ray":
        from . import ray_init

        mod.__dict__.update(
            init=ray_init.init,
            shutdown=ray_init.shutdown,
            is_initialized=ray_init.is_initialized,
            __version__=RAY_API_VERSION,
        )
    return mod


class _ServedLoader(importlib.abc.Loader):
    def __init__(self, target: types.ModuleType):
        self.target = target

    def create_module(self, spec):
        return _make(spec.name, self.target)

    def exec_module(self, module):
        pass  # raynb's module already ran


class RayFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: ``ray`` and ``ray.*`` come from raynb, or fail naming why."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in horovod_name.NAMES:
            return horovod_name.find_spec(fullname)
        if fullname != "ray" and not fullname.startswith("ray."):
            return None
        if fullname.split(".")[:3] in (["ray", "tune", "examples"], ["ray", "train", "examples"]):
            return _example_spec(fullname)
        name = raynb_name(fullname)
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is None or not (name == e.name or name.startswith(e.name + ".")):
                raise  # a module that raynb's own code imports is missing: its own error
            # No name=: importlib would swallow an error named for `from ray import x`'s x
            # and say only "cannot import name"; this one names the fix.
            raise ModuleNotFoundError(not_served_message(f"`{fullname}`")) from None
        return importlib.machinery.ModuleSpec(
            fullname, _ServedLoader(module), is_package=hasattr(module, "__path__")
        )


def _example_spec(fullname: str):
    """Ray's shipped examples import each other (``ray.tune.examples.mnist_pytorch``): their
    source comes from the installed Ray wheel, run as any script's code is, under the hook."""
    import os

    real = importlib.machinery.PathFinder.find_spec("ray")  # located, not imported
    if real is None or not real.submodule_search_locations:
        raise ModuleNotFoundError(
            f"module `{fullname}` is one of Ray's examples, read from the "
            f"installed `ray` wheel, and no `ray` is installed",
            name=fullname,
        )
    base = os.path.join(real.submodule_search_locations[0], *fullname.split(".")[1:])
    for path, is_pkg in ((os.path.join(base, "__init__.py"), True), (base + ".py", False)):
        if os.path.isfile(path):
            loader = importlib.machinery.SourceFileLoader(fullname, path)
            return importlib.util.spec_from_file_location(
                fullname,
                path,
                loader=loader,
                submodule_search_locations=[os.path.dirname(path)] if is_pkg else None,
            )
    raise ModuleNotFoundError(
        f"No module named {fullname!r} (in the installed Ray's examples)", name=fullname
    )


_finder: RayFinder | None = None


def installed() -> bool:
    """Whether this process serves ``import ray`` from raynb."""
    return _finder is not None


def install() -> None:
    """Serve ``import ray`` (and ``ray.train``, ``ray.tune``, ``ray.data``, ``ray.air`` and
    their submodules) from raynb in this process; a second call does nothing.

    Raises:
        RuntimeError: real Ray is already imported in this process (its modules are in use:
            restart the kernel/process and install before the first ``import ray``).
    """
    global _finder
    if _finder is not None:
        return
    real = [
        n
        for n, m in sys.modules.items()
        if (n == "ray" or n.startswith("ray.")) and not isinstance(m, ServedModule)
    ]
    if real:
        raise RuntimeError(
            "real Ray is already imported in this process, so `import ray` cannot "
            "be served by raynb: call raynb.compat.install() before the first "
            "`import ray` (restart the kernel first)"
        )
    _finder = RayFinder()
    sys.meta_path.insert(0, _finder)
    from ..client import shipping

    shipping.payload_preludes.append(_WorkerHook())


def uninstall() -> None:
    """Undo :func:`install`: ``import ray`` finds real Ray again (served modules are dropped)."""
    global _finder
    if _finder is None:
        return
    sys.meta_path.remove(_finder)
    _finder = None
    # Every ray module loaded while installed was served (install refuses next to real Ray's):
    # the proxies and the examples read from the wheel under the hook.
    for n in [n for n in sys.modules if n == "ray" or n.startswith("ray.")]:
        del sys.modules[n]
    from ..client import shipping

    shipping.payload_preludes[:] = [p for p in shipping.payload_preludes if not isinstance(p, _WorkerHook)]


def install_on_worker() -> None:
    """Unpickled on a worker before a function shipped from a process with the hook: the same
    hook there, unless real Ray is already loaded in that worker (left as it is)."""
    if not any(n == "ray" or n.startswith("ray.") for n in sys.modules) or installed():
        install()


class _WorkerHook:
    def __reduce__(self):
        return install_on_worker, ()
