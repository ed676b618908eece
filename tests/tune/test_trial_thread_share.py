"""Concurrent one-rank trials run with their share of the node's cores from their first step,
not from their first report: the head's new share is taken on the rank's main thread between
two lines of the function. And a function that chose its own thread count keeps it, also
when it chose the share's own count."""

from __future__ import annotations

import os
import time

import pytest

import raynb
from raynb import tune
from raynb.train import RunConfig


def _node_cpus() -> int:
    nodes = raynb.cluster_status()["nodes"]
    assert len(nodes) == 1, nodes  # the session cluster: one node, this machine
    return nodes[0]["cpus"]


def _arrive_and_wait(d: str, stage: str, count: int) -> None:
    open(os.path.join(d, f"{stage}-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + 30
    while sum(n.startswith(stage) for n in os.listdir(d)) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def _first_step_threads(config):
    """No report, no output before the step: only the head's share can change the count."""
    import torch

    at_entry = torch.get_num_threads()
    _arrive_and_wait(config["dir"], "started", 4)  # all four ranks busy on the node
    a = torch.randn(64, 64)
    t0 = time.monotonic()
    # The step: torch work until the share arrived (the head's tick, one message), at most 5 s.
    while torch.get_num_threads() != config["share"] and time.monotonic() - t0 < 5:
        a = torch.tanh(a @ a)
    tune.report({"entry": at_entry, "threads": torch.get_num_threads(), "waited": time.monotonic() - t0})
    _arrive_and_wait(config["dir"], "reported", 4)  # none ends (and grows the others' share) early


@pytest.mark.timeout(120)
def test_four_trials_run_their_first_step_with_the_share(warm, tmp_path):
    cores = _node_cpus()
    share = max(1, cores // 4)
    grid = tune.Tuner(
        _first_step_threads,
        param_space={"dir": str(tmp_path), "share": share, "i": tune.grid_search(list(range(4)))},
        tune_config=tune.TuneConfig(max_concurrent_trials=4),
        run_config=RunConfig(verbose=0),
    ).fit()
    assert all(r.error is None for r in grid), [r.error for r in grid]
    seen = [(r.metrics["entry"], r.metrics["threads"], round(r.metrics["waited"], 2)) for r in grid]
    assert [s[1] for s in seen] == [share] * 4, f"(threads at entry, at the step, s waited): {seen}"


def _own_choice_kept(config):
    import torch

    d = config["dir"]
    if config["role"] == "short":
        _arrive_and_wait(d, "started", 2)
        return
    _arrive_and_wait(d, "started", 2)
    torch.set_num_threads(config["own"])  # the share of two busy ranks, chosen by the function
    while os.path.exists(os.path.join(d, "short-running")):
        time.sleep(0.01)
    time.sleep(1.0)  # the head's larger share, once the short trial ended, has come
    tune.report({"threads": torch.get_num_threads()})  # a report takes a pending share
    time.sleep(0.2)
    tune.report({"threads": torch.get_num_threads()})


def _short_then_flag(config):
    try:
        _own_choice_kept(config)
    finally:
        if config["role"] == "short":
            os.remove(os.path.join(config["dir"], "short-running"))


@pytest.mark.timeout(120)
def test_a_function_that_chose_the_shares_count_keeps_it_when_the_share_grows(warm, tmp_path):
    cores = _node_cpus()
    if cores < 2:
        pytest.skip("one core: the share cannot grow")
    own = cores // 2
    open(tmp_path / "short-running", "w").close()
    grid = tune.Tuner(
        _short_then_flag,
        param_space={"dir": str(tmp_path), "own": own, "role": tune.grid_search(["short", "long"])},
        tune_config=tune.TuneConfig(max_concurrent_trials=2),
        run_config=RunConfig(verbose=0),
    ).fit()
    assert all(r.error is None for r in grid), [r.error for r in grid]
    long = [r for r in grid if r.config["role"] == "long"][0]
    assert [m["threads"] for m in long.metrics_dataframe.to_dict("records")] == [own, own]
