"""A training function that uses real Ray's ray.train / ray.tune / ray.data / ray.air is
refused before anything is sent, naming the module, the line and the fix; raynb's own
modules under Ray's names (``raynb run``'s import hook) pass. Uses the installed ray."""

import os
import types
import uuid

import pytest

import raynb
import raynb.tune
from raynb.client.real_ray import RealRayError
from raynb.client.shipping import dumps_payload

ray = pytest.importorskip("ray")
import ray.train  # noqa: E402, F401 - real Ray, as a user's script imports it
import ray.tune  # noqa: E402, F401


def _main_function(source: str, name: str = "fn", **globals_):
    filename = f"<cell-{uuid.uuid4().hex[:8]}>"
    ns = {"__name__": "__main__", **globals_}
    exec(compile(source, filename, "exec"), ns)
    return ns[name], filename


def _refused(fn) -> RealRayError:
    with pytest.raises(RealRayError) as info:
        dumps_payload(fn, {})
    return info.value


@pytest.mark.parametrize(
    "source, module, line",
    [
        ("from ray import train\ndef fn(config):\n    x = 1\n    train.report({'x': x})\n", "ray.train", 4),
        ("import ray\ndef fn(config):\n    ray.tune.report({'x': 1})\n", "ray.tune", 3),
        ("def fn(config):\n    import ray.train.torch\n    return 1\n", "ray.train", 2),
        ("def fn(config):\n    from ray import data\n    return data\n", "ray.data", 2),
        (
            "from ray.train import ScalingConfig\ndef fn(config):\n\n    return ScalingConfig(num_workers=1)\n",
            "ray.train",
            4,
        ),
        (
            "from ray.tune import report\ndef helper(x):\n    report({'x': x})\n"
            "def fn(config):\n    helper(1)\n",
            "ray.tune",
            3,
        ),
    ],
)
def test_real_ray_is_refused_with_module_line_and_fix(source, module, line):
    fn, filename = _main_function(source)
    err = _refused(fn)
    assert err.module == module and err.where == f"{filename}:{line}", str(err)
    text = str(err)
    assert module in text and f"import raynb.{module.split('.')[1]}" in text and "raynb run" in text


def test_a_wrapped_function_and_a_closure_are_looked_into():
    fn, filename = _main_function(
        "def make():\n    from ray.air import session\n"
        "    def fn(config):\n        session.report({})\n    return fn\n",
        "make",
    )
    inner = fn()
    import functools

    assert _refused(functools.partial(inner)).module == "ray.air"
    assert _refused(raynb.tune.with_parameters(inner, data=1)).module == "ray.air"


def test_raynb_under_rays_names_and_ray_core_pass():
    shim = types.ModuleType("ray.train")  # what an import hook serving ray.* from raynb makes
    shim.__file__ = raynb.train.__file__
    shim.report = raynb.train.report
    fn, _ = _main_function("def fn(config):\n    train.report({'x': 1})\n", train=shim)
    dumps_payload(fn, {})
    fn, _ = _main_function("import ray\ndef fn(config):\n    return ray.is_initialized()\n")
    dumps_payload(fn, {})
    fn, _ = _main_function("from raynb import train\ndef fn(config):\n    train.report({'data': 1})\n")
    dumps_payload(fn, {})


def test_imports_inside_the_function_pass_while_raynb_serves_ray(monkeypatch):
    import sys

    from raynb.compat.ray_shim import RayFinder  # raynb run's hook, not installed: only listed

    monkeypatch.setattr(sys, "meta_path", [RayFinder(), *sys.meta_path])
    fn, _ = _main_function("def fn(config):\n    import ray.train\n    return 1\n")
    dumps_payload(fn, {})


def test_fit_refuses_before_submitting(cluster):
    from raynb.train.torch import TorchTrainer

    fn, filename = _main_function("from ray import train\ndef fn(config):\n    train.report({})\n")
    runs_before = len(raynb.runs()) if hasattr(raynb, "runs") else None
    with pytest.raises(RealRayError, match="ray.train"):
        TorchTrainer(fn, scaling_config=raynb.ScalingConfig(num_workers=1)).fit()
    if runs_before is not None:
        assert len(raynb.runs()) == runs_before
    assert os.environ.get("RAYNB_HOME")
