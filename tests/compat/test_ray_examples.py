"""Ray's own shipped examples (the installed wheel's ray/tune/examples, ray/train/examples)
run on raynb, unchanged under ``raynb run`` and with their imports changed to ``raynb``.

A script in tests/ray_examples_expected.json that fails is a regression. By default the
scripts of its ``"ci"`` list run (a fast subset); ``RAYNB_RAY_EXAMPLES=all`` runs every
collected script: an expected one must pass, any other xfails with its error line (or
passes: add it to the list; ``benchmarks/ray_examples.py --conformance --expected`` prints
the lists). Run alone with ``pytest -m ray_examples``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = json.loads((ROOT / "tests" / "ray_examples_expected.json").read_text())
FULL = os.environ.get("RAYNB_RAY_EXAMPLES", "") == "all"
TIMEOUT_S = 180.0

pytestmark = pytest.mark.ray_examples


def _load_collector():
    spec = importlib.util.spec_from_file_location(
        "raynb_bench_ray_examples", ROOT / "benchmarks" / "ray_examples.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


C = _load_collector()
try:
    EXAMPLES = {e.name: e for e in C.collect()}
except RuntimeError:  # no ray wheel installed: nothing to collect
    EXAMPLES = {}


def _cases():
    out = []
    for mode in C.MODES:
        expected = EXPECTED[mode]
        names = (
            sorted(n for n, e in EXAMPLES.items() if not e.excluded)
            if FULL
            else [n for n in EXPECTED["ci"] if n in expected]
        )
        out += [pytest.param(n, mode, n in expected, id=f"{mode.replace(' ', '_')}:{n}") for n in names]
    return out


@pytest.mark.skipif(not EXAMPLES, reason="the ray wheel is not installed")
def test_every_example_is_collected_or_excluded_with_a_reason():
    assert len(EXAMPLES) >= 40  # the 2.60 wheel ships 54 .py files under those folders
    for name, ex in EXAMPLES.items():
        assert ex.excluded is None or len(ex.excluded) > 10, name
    for mode in C.MODES:
        for name in EXPECTED[mode]:
            assert name in EXAMPLES, f"{name} (expected to pass {mode}) is no longer in the wheel"
            assert EXAMPLES[name].excluded is None, (
                f"{name} (expected to pass {mode}) is now excluded: {EXAMPLES[name].excluded}"
            )


def test_rewrite_imports_changes_the_name_ray_only():
    src = (
        "import ray\nfrom ray import tune\nimport ray.train.torch as t\nx = obj.ray\n"
        's = "ray.init()"  # ray\nray.init()\nrayon = 1\n'
    )
    assert C.rewrite_imports(src) == (
        "import raynb\nfrom raynb import tune\nimport raynb.train.torch as t\nx = obj.ray\n"
        's = "ray.init()"  # ray\nraynb.init()\nrayon = 1\n'
    )


@pytest.mark.skipif(not EXAMPLES, reason="the ray wheel is not installed")
@pytest.mark.parametrize("name,mode,expected", _cases())
def test_example(cluster, name, mode, expected):
    result = C.run_example(EXAMPLES[name], mode, TIMEOUT_S)
    if result["status"] == "pass":
        return
    why = f"{name} ({mode}) {result['status']} after {result['seconds']} s: {result['reason']}"
    if expected:
        pytest.fail(f"regression: {why}")
    pytest.xfail(why)
