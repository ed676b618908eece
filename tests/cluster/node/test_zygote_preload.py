"""What the zygote imports before it forks workers: its objects frozen out of the collector's
reach (a worker's first collection would otherwise copy every page of them), and the
frameworks a user asks for with ``raynb start --preload`` / ``RAYNB_PRELOAD`` (TensorFlow in
its workers' own zygote, started with the node, never in the torch zygote)."""

from __future__ import annotations

import os
import subprocess
import sys

import cloudpickle
import pytest
from conftest import private_cluster

from raynb.cluster.node.zygote import PRELOADABLE, preload_kinds, preload_modules
from raynb.train import RunConfig, ScalingConfig
from raynb.train.fit_run import execute_run

cloudpickle.register_pickle_by_value(sys.modules[__name__])
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_preload_names_map_to_their_modules_and_bad_names_are_named():
    assert preload_modules(None) == ()
    assert preload_modules(" Lightning, transformers,lightning ") == (
        PRELOADABLE["lightning"] + PRELOADABLE["transformers"]
    )
    # TensorFlow names a kind's zygote, never a module of the torch zygote.
    assert preload_modules("lightning,tensorflow") == PRELOADABLE["lightning"]
    assert preload_kinds("lightning,tensorflow,tf_keras") == ("tensorflow",)
    assert preload_kinds("lightning") == ()
    with pytest.raises(ValueError, match="choose from lightning, transformers, tensorflow"):
        preload_modules("jax")


def test_start_refuses_an_unknown_framework_before_starting_anything(tmp_path):
    env = dict(os.environ, RAYNB_HOME=str(tmp_path / "home"), PYTHONPATH=REPO)
    done = subprocess.run(
        [sys.executable, "-m", "raynb.cli", "start", "--preload", "jax"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done
    assert "--preload: cannot preload 'jax'" in done.stderr
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


def _tensorflow_mapped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return any("libtensorflow" in line or "_pywrap_tensorflow" in line for line in f)
    except OSError:
        return False


def _tensorflow_zygote(pids: set, timeout: float = 180.0):
    """``(tf_zygote, torch_zygote)`` psutil processes: the cluster's process with TensorFlow
    mapped whose parent (the torch zygote) has none."""
    import time

    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in pids:
            try:
                for child in psutil.Process(pid).children(recursive=True):
                    if _tensorflow_mapped(child.pid) and not _tensorflow_mapped(child.ppid()):
                        return child, child.parent()
            except psutil.Error:
                pass
        time.sleep(0.5)
    raise AssertionError("no TensorFlow zygote started with the node")


def _tf_at_start(config):
    import os

    return {"tf_at_start": "tensorflow" in sys.modules, "ppid": os.getppid()}


def test_preloading_tensorflow_starts_its_zygote_with_the_node(tmp_path, monkeypatch):
    pytest.importorskip("tensorflow")
    from raynb.train.tensorflow import TensorflowTrainer

    with private_cluster(tmp_path, monkeypatch, workers=1, env={"RAYNB_PRELOAD": "tensorflow"}) as (
        _info,
        _client,
        pids,
    ):
        tf_zygote, torch_zygote = _tensorflow_zygote(pids)  # before any TensorFlow run
        assert not _tensorflow_mapped(torch_zygote.pid)
        trainer = TensorflowTrainer(
            _tf_at_start,
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(verbose=0, storage_path=str(tmp_path / "results")),
        )
        _, value = execute_run(
            trainer.train_loop_per_worker,
            None,
            trainer.scaling_config,
            trainer.run_config,
            name_prefix="TensorflowTrainer",
        )
        assert value == {"tf_at_start": True, "ppid": tf_zygote.pid}
