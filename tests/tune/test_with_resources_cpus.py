"""``tune.with_resources(trainable, {"cpu": N})`` has Ray's effect: each trial's rank runs N
torch threads (Ray sets a worker's ``OMP_NUM_THREADS`` to its CPUs), no more trials run at
once than the cluster's CPUs hold, and the trial table says so; a TorchTrainer's
``ScalingConfig(resources_per_worker={"CPU": N})`` gives each rank N threads too."""

from __future__ import annotations

import time

import raynb
from raynb import tune
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer


def _threads_and_times(config):
    import torch

    start = time.time()
    threads = torch.get_num_threads()
    time.sleep(0.8)
    tune.report({"threads": threads, "start": start, "end": time.time()})


def _node_cpus() -> int:
    return sum(n.get("cpus") or 0 for n in raynb.cluster_status()["nodes"])


def test_with_resources_cpu_sets_threads_and_limits_trials_at_once(warm, capsys):
    cpus = _node_cpus()
    assert cpus >= 1
    n = cpus + 1  # more than any share of the node's cores could give a rank
    grid = tune.Tuner(
        tune.with_resources(_threads_and_times, {"cpu": n}),
        param_space={"i": tune.grid_search([0, 1, 2])},
        run_config=RunConfig(verbose=1),
    ).fit()
    results = [r.metrics for r in grid]
    assert len(results) == 3 and all(r.error is None for r in grid), [r.error for r in grid]
    assert [m["threads"] for m in results] == [n, n, n], results
    # the cluster's CPUs hold one such trial: they ran one after another
    spans = sorted((m["start"], m["end"]) for m in results)
    assert all(b[0] >= a[1] - 0.05 for a, b in zip(spans, spans[1:])), spans
    out = capsys.readouterr().out
    assert f"({n} CPUs each)" in out, out[-2000:]


def test_resources_per_worker_cpu_gives_each_rank_its_threads(warm):
    def train():
        import torch

        raynb.train.report({"threads": torch.get_num_threads()})

    n = _node_cpus() + 1
    asked = TorchTrainer(
        train,
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": n}),
        run_config=RunConfig(verbose=0),
    ).fit()
    assert asked.metrics["threads"] == n
    shared = TorchTrainer(
        train, scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(verbose=0)
    ).fit()
    assert shared.metrics["threads"] < n  # without a request: its share of the node's cores
