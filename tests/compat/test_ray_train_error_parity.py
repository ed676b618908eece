"""raynb's Ray Train error classes stand in the same subclass relations as Ray 2.60's
(``RayTrainError`` > ``TrainingFailedError`` > ``WorkerGroupError`` > ``NCCLHangError``;
``ControllerError``, ``PreemptionError``), take the same constructor arguments and pickle
by ``__reduce__``. Ray's classes are read from the installed wheel's source with ``ast``
(no ``import ray``: real Ray must not enter this process, where ``raynb run``'s tests serve
``ray`` from raynb)."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import pickle

import pytest

from raynb.errors import RayTrainError
from raynb.train import (
    ControllerError,
    NCCLHangError,
    PreemptionError,
    PreemptionInfo,
    TrainingFailedError,
    WorkerGroupError,
)

RAYNB = {
    "RayTrainError": RayTrainError,
    "TrainingFailedError": TrainingFailedError,
    "WorkerGroupError": WorkerGroupError,
    "NCCLHangError": NCCLHangError,
    "ControllerError": ControllerError,
    "PreemptionError": PreemptionError,
}


def _ray_classes() -> dict:
    """``{class name: (base names, __init__ parameter names, defines __reduce__)}`` of Ray's."""
    spec = importlib.util.find_spec("ray")
    if not spec or not spec.submodule_search_locations:
        pytest.skip("Ray is not installed")
    root = os.path.join(spec.submodule_search_locations[0], "train", "v2")
    out = {}
    for rel in ("_internal/exceptions.py", "api/exceptions.py"):
        for node in ast.parse(open(os.path.join(root, rel)).read()).body:
            if isinstance(node, ast.ClassDef) and node.name in RAYNB:
                methods = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
                init = methods.get("__init__")
                params = [a.arg for a in init.args.args[1:]] if init else None
                out[node.name] = (
                    [b.id for b in node.bases if isinstance(b, ast.Name)],
                    params,
                    "__reduce__" in methods,
                )
    return out


def _ray_subclass(classes: dict, a: str, b: str) -> bool:
    return a == b or any(_ray_subclass(classes, base, b) for base in classes.get(a, ((),))[0])


def test_the_subclass_relations_are_rays():
    classes = _ray_classes()
    assert set(classes) == set(RAYNB), set(RAYNB) - set(classes)
    for a in RAYNB:
        for b in RAYNB:
            assert issubclass(RAYNB[a], RAYNB[b]) == _ray_subclass(classes, a, b), (a, b)


def test_the_constructors_take_rays_arguments_and_pickle():
    classes = _ray_classes()
    for name, (_, params, reduces) in classes.items():
        if params is not None and name in ("WorkerGroupError", "ControllerError", "PreemptionError"):
            ours = list(inspect.signature(RAYNB[name].__init__).parameters)[1:]
            assert ours == params, name
            assert reduces and "__reduce__" in vars(RAYNB[name]), name
    info = PreemptionInfo(deadline_ms=1, preempted_node_to_ranks={"n": [0]})
    for exc in (
        WorkerGroupError("rank 0 failed", {0: ValueError("v")}),
        NCCLHangError("hung", {1: RuntimeError("r")}),
        ControllerError(RuntimeError("no room")),
        PreemptionError(info, True),
    ):
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is type(exc) and str(again) == str(exc)
