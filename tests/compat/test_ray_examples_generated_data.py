"""Ray's shipped examples that download their data (torchvision's MNIST / FashionMNIST,
Keras's datasets, Hugging Face's ``load_dataset``, an s3 CSV) run on raynb with generated
data of the same shapes and types: tests/compat/generated_data/ is put first on the import
path of the script and of a cluster of this file's own (its ``sitecustomize`` installs the
stand-ins in every process, ranks included). The scripts themselves are not changed.

The ``"generated data"`` entry of tests/ray_examples_expected.json lists the scripts that
pass per mode; its ``"ci"`` list is what a default run takes; ``RAYNB_RAY_EXAMPLES=all`` runs
every one (a script not in the lists xfails with its error line, or passes: add it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from raynb.cluster.launch import cluster_pids
from raynb.cluster.procutil import alive

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ray_examples import FULL, ROOT, TIMEOUT_S, C  # noqa: E402

EXPECTED = json.loads((ROOT / "tests" / "ray_examples_expected.json").read_text())["generated data"]

pytestmark = pytest.mark.ray_examples

try:
    EXAMPLES = {e.name: e for e in C.collect(generated_data=True) if e.generated_data}
except RuntimeError:  # no ray wheel installed
    EXAMPLES = {}


def _cases():
    out = []
    for mode in C.MODES:
        names = sorted(EXAMPLES) if FULL else [n for n in EXPECTED["ci"] if n in EXPECTED[mode]]
        out += [
            pytest.param(n, mode, n in EXPECTED[mode], id=f"{mode.replace(' ', '_')}:{n}")
            for n in names
            if n in EXAMPLES
        ]
    return out


@pytest.fixture(scope="module")
def shim_cluster(tmp_path_factory):
    """A 4-worker cluster of its own whose processes start with the generated-data shim;
    yields the environment a script needs to use it. Stopped after, nothing left."""
    home = tmp_path_factory.mktemp("gen_home")
    env = {
        **os.environ,
        "RAYNB_HOME": str(home),
        "RAYNB_STORAGE_PATH": str(tmp_path_factory.mktemp("gen_results")),
        "RAYNB_GENERATED_DIR": str(tmp_path_factory.mktemp("gen_data")),
        "RAYNB_PROGRESS": "text",
        # The scripts' FileLocks (~/.data.lock, ...) and Keras's cache go there, not in ~.
        "HOME": str(tmp_path_factory.mktemp("gen_user_home")),
        "PYTHONPATH": os.pathsep.join([str(C.GENERATED_DATA_DIR), str(ROOT)]),
    }
    cli = [sys.executable, "-m", "raynb.cli"]
    subprocess.run([*cli, "start", "--workers", "4"], env=env, check=True, capture_output=True, timeout=180)
    pids = set(cluster_pids(json.loads((home / "cluster.json").read_text())))
    yield {
        k: env[k]
        for k in ("RAYNB_HOME", "RAYNB_STORAGE_PATH", "RAYNB_GENERATED_DIR", "RAYNB_PROGRESS", "HOME")
    }
    subprocess.run([*cli, "stop"], env=env, check=True, capture_output=True, timeout=60)
    deadline = time.monotonic() + 10
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pids), f"the generated-data cluster left {alive(pids)} behind"


@pytest.mark.skipif(not EXAMPLES, reason="the ray wheel is not installed")
def test_expected_scripts_are_collected_with_generated_data():
    for mode in C.MODES:
        for name in EXPECTED[mode]:
            assert name in EXAMPLES, f"{name} (expected to pass {mode} with generated data) is not collected"
    assert set(EXPECTED["ci"]) <= set(EXPECTED["raynb run"]) | set(EXPECTED["imports changed"])


@pytest.mark.skipif(not EXAMPLES, reason="the ray wheel is not installed")
@pytest.mark.parametrize("name,mode,expected", _cases())
def test_example_with_generated_data(shim_cluster, name, mode, expected):
    result = C.run_example(EXAMPLES[name], mode, TIMEOUT_S, env=shim_cluster)
    if result["status"] == "pass":
        return
    why = f"{name} ({mode}) {result['status']} after {result['seconds']} s: {result['reason']}"
    if expected:
        pytest.fail(f"regression: {why}")
    pytest.xfail(why)
