"""Per-worker resources: CPU, RSS and, where NVML sees GPUs, GPU use; a run keeps each
rank's peaks in run.json. On this CPU machine the GPU columns must be absent and
nothing may fail (tools/gpu_check.py is the check for a GPU machine)."""
from __future__ import annotations

import json
import os

import pytest

import raynb
from raynb.client.status import format_status
from raynb.cluster.gpu_stats import GpuSampler


def _hold_memory(config):
    import time

    import numpy as np
    from raynb.train import report

    block = np.ones(config["mib"] << 17)  # config["mib"] MiB of float64, touched
    time.sleep(config["hold_s"])          # the node agent samples once a second
    report({"n": float(block[0])})


def test_gpu_sampler_is_off_without_a_driver_and_never_raises():
    sampler = GpuSampler()
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("NVML works here: tools/gpu_check.py checks the GPU columns")
    except Exception:  # noqa: BLE001
        pass
    assert not sampler.enabled
    assert sampler.sample([os.getpid()]) == {}
    sampler.close()


def test_run_json_keeps_each_ranks_peak_rss_and_status_has_no_gpu_columns(warm):
    result = raynb.TorchTrainer(_hold_memory, train_loop_config={"mib": 64, "hold_s": 2.5},
                                scaling_config=raynb.ScalingConfig(num_workers=2),
                                run_config=raynb.RunConfig(verbose=0)).fit()
    record = json.load(open(os.path.join(result.path, "run.json")))
    peaks = record["peak_resources"]
    assert set(peaks) == {"0", "1"}, peaks
    for rank, peak in peaks.items():
        assert peak["rss"] > 64 << 20, (rank, peak)   # the 64 MiB block was seen
        assert "gpu_mem_used" not in peak
    text = format_status(raynb.cluster_status())
    header = next(line for line in text.splitlines() if line.startswith("worker"))
    assert "cpu%" in header and "rss" in header and "gpu" not in header
