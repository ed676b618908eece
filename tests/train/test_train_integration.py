"""Training on the real warm cluster: collectives, ranks, DDP on digits, run directory."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import cloudpickle
import pytest

import raynb
from raynb.train.fit_run import execute_run
from raynb.train.torch import TorchTrainer

# Functions defined here travel by value, as a notebook's do.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _allreduce_and_context():
    import os

    import torch
    import torch.distributed as dist

    from raynb.train import get_context, report

    ctx = get_context()
    rank = ctx.get_world_rank()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    mine = {
        "rank": rank,
        "dist_rank": dist.get_rank(),
        "local_rank": ctx.get_local_rank(),
        "world_size": ctx.get_world_size(),
        "dist_world_size": dist.get_world_size(),
        "local_world_size": ctx.get_local_world_size(),
        "node_rank": ctx.get_node_rank(),
        "env_rank": int(os.environ["RANK"]),
        "env_local_rank": int(os.environ["LOCAL_RANK"]),
        "sum": t.item(),
        "pid": os.getpid(),
        "trial_name": ctx.get_trial_name(),
        "trial_dir": ctx.get_trial_dir(),
    }
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    report({"sum": t.item(), "ranks": everyone})
    return everyone


def test_all_reduce_sum_and_ranks_on_every_rank(warm):
    result, ret = execute_run(
        _allreduce_and_context, None, raynb.ScalingConfig(num_workers=4), raynb.RunConfig(verbose=0)
    )
    assert result.state == "FINISHED"
    assert result.metrics["sum"] == 10.0
    for everyone in (ret, result.metrics["ranks"]):
        assert [r["rank"] for r in everyone] == [0, 1, 2, 3]
        for i, r in enumerate(everyone):
            assert r["sum"] == 10.0, r
            assert r["dist_rank"] == r["env_rank"] == i
            assert r["local_rank"] == r["env_local_rank"] == i  # one node: local == world rank
            assert r["world_size"] == r["dist_world_size"] == 4
            assert r["local_world_size"] == 4
            assert r["node_rank"] == 0
            assert (r["trial_name"], r["trial_dir"]) == (result.name, result.path)  # Ray Train's names
    assert len({r["pid"] for r in ret}) == 4, "each rank is its own process"


def test_trainer_fit_metrics_are_rank0_last_report(warm):
    def fn(config):
        from raynb.train import get_context, report

        rank = get_context().get_world_rank()
        for step in range(3):
            report({"step": step, "rank": rank, "value": step * config["k"] + rank})

    result = TorchTrainer(
        fn,
        train_loop_config={"k": 10},
        scaling_config=raynb.ScalingConfig(num_workers=4),
        run_config=raynb.RunConfig(verbose=0),
    ).fit()
    assert result.error is None and result.state == "FINISHED"
    assert result.metrics["rank"] == 0 and result.metrics["step"] == 2
    assert result.metrics["value"] == 20
    assert result.metrics["training_iteration"] == 3
    assert list(result.metrics_dataframe["value"]) == [0, 10, 20]
    assert set(result.metrics_dataframe["rank"]) == {0}


def _train_digits_short(config):
    """A short DDP run on digits; returns (val acc, every rank's parameter fingerprint)."""
    import hashlib

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset

    from raynb.demo import load_digits_split, make_model
    from raynb.train import get_context, report
    from raynb.train.torch import prepare_data_loader, prepare_model

    # A different seed per rank: equal parameters at the end are DDP's doing, not the seed's.
    torch.manual_seed(1000 + get_context().get_world_rank())
    X_tr, y_tr, X_va, y_va = load_digits_split()
    loader = prepare_data_loader(
        DataLoader(
            TensorDataset(torch.from_numpy(X_tr), torch.from_numpy(y_tr)),
            batch_size=config["batch_size"],
            shuffle=True,
        )
    )
    model = prepare_model(make_model(32))
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
    loss_fn = torch.nn.CrossEntropyLoss()
    Xv, yv = torch.from_numpy(X_va), torch.from_numpy(y_va)
    seen = 0
    for epoch in range(config["epochs"]):
        model.train()
        for xb, yb in loader:
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()
            seen += len(xb)
        model.eval()
        with torch.no_grad():
            acc = (model(Xv).argmax(1) == yv).float().mean().item()
        report({"epoch": epoch, "val_accuracy": acc, "samples_seen": seen})
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    fingerprint = (hashlib.sha256(flat.numpy().tobytes()).hexdigest(), float(flat.sum()), seen)
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, fingerprint)
    return everyone


def test_ddp_digits_parameters_identical_and_learns(warm):
    config = {"lr": 5e-3, "batch_size": 32, "epochs": 4}
    result, prints = execute_run(
        _train_digits_short, config, raynb.ScalingConfig(num_workers=4), raynb.RunConfig(verbose=0)
    )
    assert result.state == "FINISHED"
    assert len(prints) == 4
    hashes = {h for h, _, _ in prints}
    assert len(hashes) == 1, f"parameters differ across ranks after DDP training: {prints}"
    # Each rank trained on its own shard (a quarter of the 1437 training images per epoch).
    seen = [s for _, _, s in prints]
    assert all(340 * 4 <= s <= 370 * 4 for s in seen), seen
    assert len(result.metrics_dataframe) == 4
    assert result.metrics["val_accuracy"] >= 0.85, result.metrics  # chance is 0.10


def test_run_directory_files(warm, tmp_path):
    def fn(config):
        from raynb.train import report

        for i in range(config["n"]):
            report({"i": i, "loss": 1.0 / (i + 1)})

    config = {"n": 3, "lr": 0.01, "tag": "x"}
    result = TorchTrainer(
        fn,
        train_loop_config=config,
        scaling_config=raynb.ScalingConfig(num_workers=2),
        run_config=raynb.RunConfig(name="rundir_check", storage_path=str(tmp_path), verbose=0),
    ).fit()
    path = Path(result.path)
    assert path == tmp_path / "rundir_check"
    assert json.loads((path / "params.json").read_text()) == config
    assert result.config == config
    lines = (path / "result.json").read_text().splitlines()
    assert len(lines) == 3  # one JSON object per rank-0 report (rank 1's are not written)
    rows = [json.loads(line) for line in lines]
    assert [r["i"] for r in rows] == [0, 1, 2]
    assert [r["loss"] for r in rows] == [1.0, 0.5, pytest.approx(1 / 3)]
    assert [r["training_iteration"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert {"timestamp", "time_total_s", "time_this_iter_s"} <= set(r)
    with open(path / "progress.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [int(r["i"]) for r in table] == [0, 1, 2]
    assert [float(r["loss"]) for r in table] == pytest.approx([1.0, 0.5, 1 / 3])
    assert not (path / "error.txt").exists()


def test_train_loop_config_must_be_a_dict():
    with pytest.raises(TypeError, match=r"train_loop_config must be a dict .* got list: \[1, 2\]"):
        TorchTrainer(lambda config: None, train_loop_config=[1, 2])
    assert TorchTrainer(lambda config: None, train_loop_config={"lr": 1}).train_loop_config == {"lr": 1}


def test_a_bad_max_report_bytes_does_not_break_import_raynb():
    import subprocess

    for bad in ("2MB", "-5", "0"):
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "from raynb.train.report_metrics import MAX_REPORT_BYTES as m; import raynb; print(m)",
            ],
            capture_output=True,
            text=True,
            env={**__import__("os").environ, "RAYNB_MAX_REPORT_BYTES": bad},
        )
        assert out.returncode == 0 and out.stdout.strip() == str(1 << 20), (bad, out.stderr)
