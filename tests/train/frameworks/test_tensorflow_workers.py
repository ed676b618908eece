"""TensorFlow's workers are a kind of their own: a TensorflowTrainer run's ranks are forked
from a TensorFlow zygote (a child of the torch zygote that imported TensorFlow once), so
TensorFlow is imported before the function starts; TensorFlow never enters the torch
zygote nor a torch worker; a killed TensorFlow rank is replaced by a worker of that kind,
which does not import TensorFlow again; a torch run after them does not land on them."""

from __future__ import annotations

import sys

import cloudpickle
import psutil
import pytest

pytest.importorskip("tensorflow")

from raynb.train import FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from raynb.train.tensorflow import TensorflowTrainer  # noqa: E402

pytestmark = pytest.mark.tensorflow
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _gather(values: list) -> list:
    """Every rank's ``values`` (ints), over the run's torch group, in rank order."""
    import torch
    import torch.distributed as dist

    mine = torch.tensor(values, dtype=torch.int64)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return [t.tolist() for t in every]


def _where_am_i(config):
    import os

    tf_at_start = "tensorflow" in sys.modules  # before this function imported anything
    import tensorflow as tf  # noqa: F401

    marker = config.get("kill_marker")
    from raynb.train import get_context

    if marker and get_context().get_world_rank() == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), 9)  # a rank lost mid-run
    return {
        "ranks": _gather([os.getpid(), os.getppid(), int(tf_at_start)]),
        "kind": os.environ.get("RAYNB_WORKER_KIND"),
    }


def _torch_where():
    import os

    return {"ranks": _gather([os.getpid(), int("tensorflow" in sys.modules)])}


def _tf_fit(tmp_path, workers=2, **config):
    from raynb.train.fit_run import execute_run

    trainer = TensorflowTrainer(
        _where_am_i,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(
            verbose=0, storage_path=str(tmp_path), failure_config=FailureConfig(max_failures=1)
        ),
    )
    return execute_run(
        trainer.train_loop_per_worker,
        trainer.train_loop_config,
        trainer.scaling_config,
        trainer.run_config,
        name_prefix="TensorflowTrainer",
    )


def _tensorflow_mapped(pid: int) -> list:
    """TensorFlow's native libraries loaded in process ``pid`` (none: TensorFlow never entered it)."""
    with open(f"/proc/{pid}/maps") as f:
        return sorted(
            {line.split()[-1] for line in f if "libtensorflow" in line or "_pywrap_tensorflow" in line}
        )


def _torch_run(tmp_path, workers):
    from raynb.train.fit_run import execute_run

    return execute_run(
        _torch_where,
        None,
        ScalingConfig(num_workers=workers),
        RunConfig(verbose=0, storage_path=str(tmp_path)),
    )


def test_tensorflow_ranks_come_from_a_tensorflow_zygote_and_torch_never_sees_it(warm, tmp_path):
    torch_zygote = warm.status()["nodes"][0]["zygote_pid"]
    result, value = _tf_fit(tmp_path / "tf")
    assert result.error is None and value["kind"] == "tensorflow", value
    ranks = value["ranks"]
    assert all(tf_at_start for _, _, tf_at_start in ranks), ranks  # paid at fork, not in the run
    tf_zygotes = {ppid for _, ppid, _ in ranks}
    assert len(tf_zygotes) == 1 and torch_zygote not in tf_zygotes, (tf_zygotes, torch_zygote)
    (tf_zygote,) = tf_zygotes
    assert psutil.Process(tf_zygote).ppid() == torch_zygote  # the torch zygote's child
    assert _tensorflow_mapped(tf_zygote) and not _tensorflow_mapped(torch_zygote)
    kinds = {w["pid"]: w.get("kind") for w in warm.status()["workers"]}
    assert all(kinds[pid] == "tensorflow" for pid, _, _ in ranks), kinds
    # A torch run of every torch worker, after it: none of them is a TensorFlow worker.
    result, torch_value = _torch_run(tmp_path / "torch", 4)
    torch_pids = {pid for pid, _ in torch_value["ranks"]}
    assert not any(tf for _, tf in torch_value["ranks"]), torch_value
    assert not torch_pids & {pid for pid, _, _ in ranks}
    assert not {pid: _tensorflow_mapped(pid) for pid in torch_pids if _tensorflow_mapped(pid)}
    assert not _tensorflow_mapped(torch_zygote)


def test_a_killed_tensorflow_rank_is_replaced_by_a_tensorflow_worker(warm, tmp_path):
    result, value = _tf_fit(tmp_path, kill_marker=str(tmp_path / "killed"))
    assert result.error is None, result.error
    assert (tmp_path / "killed").exists()  # attempt 0's rank 1 was killed
    ranks = value["ranks"]
    # The retry's ranks: TensorFlow imported before the function, by their zygote.
    assert value["kind"] == "tensorflow" and all(tf for _, _, tf in ranks), value
    kinds = {w["pid"]: w.get("kind") for w in warm.status()["workers"]}
    assert all(kinds.get(pid) == "tensorflow" for pid, _, _ in ranks), kinds


def test_a_dead_tensorflow_zygote_takes_its_workers_and_the_next_run_starts_another(warm, tmp_path):
    import os
    import signal
    import time

    result, value = _tf_fit(tmp_path / "before")
    assert result.error is None
    ((pid0, tf_zygote, _), _) = value["ranks"]
    os.kill(tf_zygote, signal.SIGKILL)
    # Its workers die with it and are reported (the torch zygote reaps them): the head forgets them.
    deadline = time.monotonic() + 30
    while any(w["pid"] == pid0 for w in warm.status()["workers"]):
        assert time.monotonic() < deadline, warm.status()["workers"]
        time.sleep(0.1)
    assert not psutil.pid_exists(pid0)
    result, value = _tf_fit(tmp_path / "after")
    assert result.error is None and value["kind"] == "tensorflow"
    new_zygotes = {ppid for _, ppid, _ in value["ranks"]}
    assert tf_zygote not in new_zygotes and len(new_zygotes) == 1, new_zygotes


def test_a_tuned_tensorflow_trainer_asks_for_tensorflow_workers():
    from raynb.client.submit_and_follow import build_submission
    from raynb.tune.tuner import _trainable_parts

    trainer = TensorflowTrainer(_where_am_i, scaling_config=ScalingConfig(num_workers=2))
    fn, scaling, config, _, _, name = _trainable_parts(trainer, {})
    assert name == "TensorflowTrainer"
    spec, _ = build_submission(fn, config, scaling, RunConfig(verbose=0), name_prefix=name)
    assert spec["worker_kind"] == "tensorflow"
    spec, _ = build_submission(_torch_where, None, scaling, RunConfig(verbose=0))
    assert "worker_kind" not in spec
