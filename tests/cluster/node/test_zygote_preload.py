"""What the zygote imports before it forks workers: its objects frozen out of the collector's
reach (a worker's first collection would otherwise copy every page of them), and the
frameworks a user asks for with ``raynb start --preload`` / ``RAYNB_PRELOAD`` (never
TensorFlow)."""

from __future__ import annotations

import os
import subprocess
import sys

import cloudpickle
import pytest
from conftest import private_cluster

from raynb.cluster.node.zygote import PRELOADABLE, preload_modules
from raynb.train import RunConfig, ScalingConfig
from raynb.train.fit_run import execute_run

cloudpickle.register_pickle_by_value(sys.modules[__name__])
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_preload_names_map_to_their_modules_and_bad_names_are_named():
    assert preload_modules(None) == ()
    assert preload_modules(" Lightning, transformers,lightning ") == (
        PRELOADABLE["lightning"] + PRELOADABLE["transformers"]
    )
    with pytest.raises(ValueError, match="TensorFlow is never imported into the zygote"):
        preload_modules("lightning,tensorflow")
    with pytest.raises(ValueError, match="choose from lightning, transformers"):
        preload_modules("jax")


def test_start_refuses_to_preload_tensorflow_before_starting_anything(tmp_path):
    env = dict(os.environ, RAYNB_HOME=str(tmp_path / "home"), PYTHONPATH=REPO)
    done = subprocess.run(
        [sys.executable, "-m", "raynb.cli", "start", "--preload", "tensorflow"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done
    assert "--preload: 'tensorflow' cannot be preloaded" in done.stderr
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").iterdir())


def _what_the_worker_started_with(config):
    import gc

    return {
        "frozen": gc.get_freeze_count(),
        "modules": sorted(m for m in sys.modules if m.startswith("transformers")),
    }


def _start_state(storage) -> dict:
    """Rank 0's return value of a 1-rank run of ``_what_the_worker_started_with``."""
    _, value = execute_run(
        _what_the_worker_started_with,
        {},
        ScalingConfig(num_workers=1),
        RunConfig(verbose=0, storage_path=str(storage)),
    )
    return value


def test_workers_inherit_the_zygotes_objects_frozen(warm, tmp_path):
    state = _start_state(tmp_path)
    assert state["frozen"] > 10_000, state["frozen"]  # torch's and raynb's modules' objects


def test_a_preloaded_framework_is_in_the_worker_before_its_first_fit(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    with private_cluster(tmp_path, monkeypatch, workers=1, env={"RAYNB_PRELOAD": "transformers"}):
        state = _start_state(tmp_path / "results")
    assert "transformers.trainer" in state["modules"], state["modules"][:5]
    assert state["frozen"] > 10_000
