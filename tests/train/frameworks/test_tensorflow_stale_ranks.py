"""A TensorflowTrainer rank counts as set up for another cluster only once TensorFlow's
runtime started in its process: an import alone (a script's module-level
``import tensorflow``, imported again when its function is unpickled on a fresh worker)
leaves the collectives configurable. Before, such a worker was replaced again and again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

pytestmark = pytest.mark.tensorflow
ROOT = str(Path(__file__).resolve().parents[3])

PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
from raynb.train.tensorflow.cluster_spec import _tf_runtime_started, stale_ranks
assert not _tf_runtime_started()
import tensorflow as tf
imported = _tf_runtime_started()
tf.constant(1.0) + 1.0
started = _tf_runtime_started()
want = ["a:1", "b:2"]
fresh = [{"addr": a, "tf": imported, "spec": None} for a in want]
used = [{"addr": a, "tf": started, "spec": None} for a in want]
print(imported, started, stale_ranks(fresh), stale_ranks(used))
"""


def test_an_imported_but_unstarted_tensorflow_is_not_stale():
    out = subprocess.run(
        [sys.executable, "-c", PROBE, ROOT], capture_output=True, text=True, timeout=180, check=True
    ).stdout.split("\n")[-2]
    assert out == "False True [] [0, 1]", out
