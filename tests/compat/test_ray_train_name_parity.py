"""Every public name of Ray Train 2.60's modules (their ``__all__``) is served by raynb's
module of the same path: a name Ray adds and raynb lacks fails here, by name.

Ray's ``__all__`` lists are read from the installed wheel's source (no ``import ray``: real Ray
must not enter this process, where ``raynb run``'s tests serve ``ray`` from raynb). raynb's
packages are read the same way (their ``__all__``; ruff's F822 keeps each name defined), so
no framework is imported here; a plain module (``raynb.train.torch``) is imported."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os

import pytest

import raynb

RAYNB_ROOT = os.path.dirname(raynb.__file__)

MODULES = [
    "train",
    "train.torch",
    "train.xgboost",
    "train.lightgbm",
    "train.tensorflow",
    "train.lightning",
    "train.huggingface.transformers",
]


def _ray_root() -> str | None:
    spec = importlib.util.find_spec("ray")  # finds the wheel without running ray/__init__.py
    return spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else None


def _literal_names(node) -> list:
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def ray_all(module: str) -> set:
    """The names in ``ray.<module>.__all__``."""
    return all_in(os.path.join(_ray_root(), *module.split("."), "__init__.py"))


def raynb_names(module: str) -> set:
    """The names ``raynb.<module>`` serves: its package's ``__all__``, or a module's attributes."""
    init = os.path.join(RAYNB_ROOT, *module.split("."), "__init__.py")
    if os.path.exists(init):
        return all_in(init)
    return set(dir(importlib.import_module(f"raynb.{module}")))


def all_in(path: str) -> set:
    """The names a source file puts in ``__all__``: its assignment, ``+=`` and ``.extend([...])``."""
    names: set = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            names.update(_literal_names(node.value))
        elif isinstance(node, ast.AugAssign) and getattr(node.target, "id", None) == "__all__":
            names.update(_literal_names(node.value))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "extend"
            and getattr(node.func.value, "id", None) == "__all__"
        ):
            names.update(_literal_names(node.args[0]) if node.args else [])
    return names


@pytest.mark.skipif(_ray_root() is None, reason="Ray is not installed (pip install 'ray[train]==2.60.*')")
@pytest.mark.parametrize("module", MODULES)
def test_raynb_serves_every_name_in_rays_all(module):
    names = ray_all(module)
    assert names, f"read no __all__ from ray.{module}"
    ours = raynb_names(module)
    missing = sorted(names - ours)
    assert not missing, f"raynb.{module} lacks Ray 2.60's public names: {missing}"


def test_the_reader_finds_rays_v2_names():
    """The ``__all__.extend`` in ``ray/train/__init__.py`` is read (where Ray 2.60 lists its v2 names)."""
    if _ray_root() is None:
        pytest.skip("Ray is not installed")
    assert {"get_all_reported_checkpoints", "UserCallback", "TRAIN_DATASET_KEY"} <= ray_all("train")
