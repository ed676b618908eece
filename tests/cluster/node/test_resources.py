"""Per-worker resources: CPU, RSS and, where NVML sees GPUs, GPU use; a run keeps each
rank's peaks in run.json. On this CPU machine the GPU columns must be absent and
nothing may fail (tools/gpu_check.py is the check for a GPU machine)."""

from __future__ import annotations

import json
import os

import pytest

import raynb
from raynb.client.status import format_status
from raynb.cluster.node.gpu_stats import GpuSampler


def _hold_memory(config):
    import time

    import numpy as np

    from raynb.train import report

    block = np.ones(config["mib"] << 17)  # config["mib"] MiB of float64, touched
    time.sleep(config["hold_s"])  # the node agent samples once a second
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
    result = raynb.TorchTrainer(
        _hold_memory,
        train_loop_config={"mib": 64, "hold_s": 2.5},
        scaling_config=raynb.ScalingConfig(num_workers=2),
        run_config=raynb.RunConfig(verbose=0),
    ).fit()
    record = json.load(open(os.path.join(result.path, "run.json")))
    peaks = record["peak_resources"]
    assert set(peaks) == {"0", "1"}, peaks
    for rank, peak in peaks.items():
        assert peak["rss"] > 64 << 20, (rank, peak)  # the 64 MiB block was seen
        assert "gpu_mem_used" not in peak
    text = format_status(raynb.cluster_status())
    header = next(line for line in text.splitlines() if line.startswith("worker"))
    assert "cpu%" in header and "rss" in header and "gpu" not in header


def test_pane_and_summary_show_gpu_use_only_where_nvml_saw_gpus():
    """The node agent adds gpu/gpu_util/gpu_mem_used/gpu_mem_total to a rank's sample only
    where NVML sees it on a GPU: the pane's line and the summary show them then, and only
    then (the CPU figures are unchanged either way)."""
    import time

    from raynb.notebook.run_pane.model import RunProgress
    from raynb.notebook.run_pane.widget import ProgressPane

    mib = 1 << 20
    t0 = time.time()

    def pane_with(workers):
        p = RunProgress("r", world_size=2, total_epochs=2)
        pane = ProgressPane(p, trailing=False)
        pane.handle({"kind": "state", "state": "RUNNING", "time": t0})
        pane.handle({"kind": "stats", "time": t0 + 1, "workers": workers})
        pane.refresh(force=True)
        return p, pane

    cpu_only = {
        "0": {"pid": 7, "cpu_percent": 50.0, "rss": 100 * mib},
        "1": {"pid": 8, "cpu_percent": 30.0, "rss": 120 * mib},
    }
    p, pane = pane_with(cpu_only)
    assert "CPU 80%" in pane.stats_html.value and "GPU" not in pane.stats_html.value
    assert not any("GPU" in line for line in p.summary_lines())

    on_gpus = {
        r: dict(
            s,
            gpu=int(r),
            gpu_util=60 + 20 * int(r),
            gpu_mem_used=(1024 + 1024 * int(r)) * mib,
            gpu_mem_total=80 * 1024 * mib,
        )
        for r, s in cpu_only.items()
    }
    p, pane = pane_with(on_gpus)
    assert "GPU 70%" in pane.stats_html.value and "3.0 GiB" in pane.stats_html.value, pane.stats_html.value
    assert p.peak_gpu_mem == {0: 1024 * mib, 1: 2048 * mib}
    assert any(line.strip().startswith("GPU memory: peak 1") for line in p.summary_lines()), p.summary_lines()
