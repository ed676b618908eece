"""The profiler without a cluster: bad options refused before anything ships, GPU columns
from a CPU profile, a cancel held during the flush (the real runs are in
test_profiler_integration.py)."""

from __future__ import annotations

import json
import sys

import cloudpickle
import pytest

import raynb
from raynb.train import RunConfig
from raynb.train.profile_result import RunProfile

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_bad_profile_options_raise_before_anything_ships():
    with pytest.raises(TypeError, match="True or a dict"):
        RunConfig(profile="yes")
    with pytest.raises(ValueError, match="unknown option.*'activ'.*wait, warmup, active"):
        RunConfig(profile=dict(activ=3))
    with pytest.raises(ValueError, match="active=0 must be an integer >= 1"):
        RunConfig(profile=dict(active=0))
    with pytest.raises(ValueError, match="with_stack='yes' must be True or False"):
        RunConfig(profile=dict(with_stack="yes"))
    with pytest.raises(RuntimeError, match="outside a training function"):
        with raynb.train.torch.profile():
            pass


def test_gpu_columns_from_a_cpu_profile(tmp_path):
    """The CUDA columns' code path (self_device_time_total), run here on a CPU profile:
    a GPU run's table ranks operators by self CUDA time."""
    import torch
    from torch.profiler import profile

    from raynb.train.profiling import top_operators

    with profile() as prof:
        torch.randn(16, 16) @ torch.randn(16, 16)
    ops, _, _ = top_operators(prof.key_averages(), 5, cuda=True)
    assert {"self_cuda_us", "cuda_total_us"} <= set(ops[0])
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "rank_0_top.json").write_text(
        json.dumps({"rank": 0, "cuda": True, "ops": ops, "schedule": {"wait": 1, "warmup": 1, "active": 3}})
    )
    run = RunProfile.from_run_dir(str(tmp_path))
    assert "self_cuda_us" in run[0].columns and "aten::mm" in run.table().index
    assert "top operators by self CUDA time" in repr(run)
    with pytest.raises(ValueError, match="table\\(by='gpu'\\): use one of self_cpu_us"):
        run.table(by="gpu")


def test_a_cancel_during_the_flush_is_held_until_the_files_are_written(tmp_path):
    """A worker's cancel is a SIGINT raising KeyboardInterrupt on the main thread (a peer
    failed, the head stops the others): one landing while a rank writes its profile waits
    for the files, then raises. A summary saying the flush began is written first, for a
    rank killed meanwhile."""
    import signal
    import threading
    import time

    import torch

    from raynb.cluster.worker import task_context
    from raynb.train import profiling

    def on_sigint(signum, frame):
        raise KeyboardInterrupt("run cancelled")

    old = signal.signal(signal.SIGINT, on_sigint)
    task_context.start({"rank": 0, "path": str(tmp_path), "attempt": 0}, lambda event: None)
    top, seen, main = tmp_path / "profile" / "rank_0_top.json", {}, threading.get_ident()

    def cancel_when_the_flush_begins():
        while not top.exists():
            time.sleep(0.0005)
        seen["stub"] = json.loads(top.read_text())
        signal.pthread_kill(main, signal.SIGINT)

    try:
        prof = profiling.RankProfiler(
            task_context.current(), profiling.profile_options(dict(wait=0, warmup=1, active=5))
        ).start()
        a = torch.zeros(4)
        for _ in range(2):  # a warmup and a recorded step: the window is cut short
            for _ in range(2000):
                a = a + 1
            prof.step()
        canceller = threading.Thread(target=cancel_when_the_flush_begins)
        canceller.start()
        with pytest.raises(KeyboardInterrupt, match="run cancelled"):
            profiling._finish(prof)
        canceller.join()
    finally:
        task_context.end()
        signal.signal(signal.SIGINT, old)
    assert seen["stub"]["flushing"] is True and "ended while writing its profile" in seen["stub"]["note"]
    final = json.loads(top.read_text())
    assert final["flushing"] is False and "made 2 reports" in final["note"]
    assert any(op["name"] == "aten::add" and op["calls"] == 2000 for op in final["ops"])
    json.loads((tmp_path / "profile" / "rank_0.json").read_text())
