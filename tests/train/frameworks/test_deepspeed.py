"""DeepSpeed on raynb's warm ranks: ``deepspeed.initialize`` in a ``TorchTrainer`` function
(Ray Train's DeepSpeed pattern, imports changed) trains over the existing gloo group with
ZeRO stages 1, 2 and 3 and a torch optimizer, compiles nothing and leaves no shared memory;
every rank's ``save_checkpoint`` becomes one raynb checkpoint (ZeRO-3's shards merged) that a
run restarted after a rank died mid-epoch resumes from; ZeRO-3 runs on ranks whose earlier
runs differ; Lightning's DeepSpeed strategy on CPU ranks is named; a warm second fit is
faster than the first."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import cloudpickle
import pytest

pytest.importorskip("deepspeed")

from raynb.train import FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from raynb.train.torch import TorchTrainer  # noqa: E402

pytestmark = pytest.mark.deepspeed
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _digests_on_every_rank(engine):
    """Every rank's sha256 (8 bytes, hex) of the whole model's parameters (ZeRO-3's
    gathered from their shards), gathered over the group."""
    import hashlib

    import deepspeed
    import torch
    import torch.distributed as dist

    params = list(engine.module.parameters())
    with deepspeed.zero.GatheredParameters(params, enabled=hasattr(params[0], "ds_id")):
        flat = torch.cat([p.detach().float().flatten() for p in params])
        mine = torch.tensor(list(hashlib.sha256(flat.numpy().tobytes()).digest()[:8]), dtype=torch.uint8)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return [bytes(t.tolist()).hex() for t in every]


def _shard_fraction(engine):
    """The share of the model's elements this rank holds (ZeRO-3's partitions; 1.0 otherwise)."""
    params = list(engine.module.parameters())
    if not hasattr(params[0], "ds_tensor"):
        return 1.0
    return sum(p.ds_tensor.numel() for p in params) / sum(p.ds_numel for p in params)


def _die_mid_epoch(engine, epoch, step, marker):
    """Rank 1 exits after the first step of epoch 1, once: mid-epoch, as a preemption would."""
    import os

    if marker and epoch == 1 and step == 0 and engine.global_rank == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(3)


def _ds_loop(config):
    """Ray Train's DeepSpeed function, with raynb's imports, on a small regression."""
    import os
    import tempfile

    import deepspeed
    import torch
    from deepspeed.accelerator import get_accelerator

    import raynb.train as train
    from raynb.train import Checkpoint

    torch.manual_seed(0)  # the same model on every rank, as under torchrun
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    ds_config = {
        "train_micro_batch_size_per_gpu": 16,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": config["stage"]},
    }
    # A torch optimizer: DeepSpeed's own Adam would be a C++ op compiled with g++ on CPU.
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_config)
    device = get_accelerator().device_name(engine.local_rank)
    start, ckpt = 0, train.get_checkpoint()
    if ckpt is not None:
        _, client_state = engine.load_checkpoint(ckpt.path)
        start = client_state["epoch"] + 1
    g = torch.Generator().manual_seed(100 + engine.global_rank)  # each rank its own rows
    x = torch.randn(128, 16, generator=g)
    y = x[:, :1] * 2 - x[:, 1:2]
    for epoch in range(start, config["epochs"]):
        for step, i in enumerate(range(0, 128, 16)):
            _die_mid_epoch(engine, epoch, step, config.get("marker"))
            loss = torch.nn.functional.mse_loss(engine(x[i : i + 16].to(device)), y[i : i + 16].to(device))
            engine.backward(loss)
            engine.step()
        with tempfile.TemporaryDirectory() as tmp:
            engine.save_checkpoint(tmp, client_state={"epoch": epoch})
            train.report({"epoch": epoch, "loss": loss.item()}, checkpoint=Checkpoint.from_directory(tmp))
    return {
        "device": device,
        "hashes": _digests_on_every_rank(engine),
        "fraction": _shard_fraction(engine),
        "root_ds_id": getattr(engine.module, "ds_id", None),
        "shm": [n for n in os.listdir("/dev/shm") if "deepspeed" in n.lower()],
        "compiled": _compiled(),
    }


def _compiled():
    """What DeepSpeed compiled into this task's private extensions directory (none expected)."""
    import os

    root = os.environ["TORCH_EXTENSIONS_DIR"]
    return sorted(os.listdir(root)) if os.path.isdir(root) else []


def _private_extensions_dir(fn):
    """Run ``fn`` with torch's C++ extension cache in a private temp dir, removed after: were
    DeepSpeed to compile an op, it would be seen, and nothing would stay in ~/.cache."""

    def wrapped(config):
        import os
        import tempfile

        old = os.environ.get("TORCH_EXTENSIONS_DIR")
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["TORCH_EXTENSIONS_DIR"] = os.path.join(tmp, "torch_extensions")
            try:
                return fn(config)
            finally:
                if old is None:
                    os.environ.pop("TORCH_EXTENSIONS_DIR", None)
                else:
                    os.environ["TORCH_EXTENSIONS_DIR"] = old

    return wrapped


def _run(tmp_path, stage=2, epochs=3, workers=2, fn=_ds_loop, **run):
    from raynb.train.fit_run import execute_run

    trainer = TorchTrainer(
        _private_extensions_dir(fn),
        train_loop_config={"stage": stage, "epochs": epochs, **run.pop("config", {})},
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path), **run),
    )
    return execute_run(
        trainer.train_loop_per_worker, trainer.train_loop_config, trainer.scaling_config, trainer.run_config
    )


def test_warm_second_fit_is_faster_than_the_first(warm, tmp_path):
    # First in the file, on all 4 workers: the first fit imports DeepSpeed into each.
    t0 = time.perf_counter()
    _run(tmp_path / "a", epochs=1, workers=4)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    _run(tmp_path / "b", epochs=1, workers=4)
    second = time.perf_counter() - t0
    assert second < first, (first, second)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_stage_trains_over_the_group_on_cpu(warm, tmp_path, stage):
    result, value = _run(tmp_path, stage=stage)
    assert value["device"] == "cpu" and value["compiled"] == [] and value["shm"] == [], value
    assert len(set(value["hashes"])) == 1, value["hashes"]
    losses = list(result.metrics_dataframe["loss"])
    assert losses[-1] < losses[0], losses
    if stage == 3:  # each rank holds half of every parameter (padded to a multiple of 2)
        assert value["fraction"] == pytest.approx(0.5, abs=0.01), value
    ckpt = Path(result.checkpoint.path)
    tag = (ckpt / "latest").read_text().strip()
    files = sorted(p.name for p in (ckpt / tag).iterdir())
    # Every rank's optimizer shard is in the one checkpoint: raynb merged the ranks' files.
    assert sum(f.endswith("optim_states.pt") for f in files) == 2, files


def test_rank_killed_mid_epoch_resumes_from_the_committed_checkpoint(warm, tmp_path):
    _, whole = _run(tmp_path / "whole", stage=3)
    result, value = _run(
        tmp_path / "killed",
        stage=3,
        config={"marker": str(tmp_path / "died")},
        failure_config=FailureConfig(max_failures=1),
    )
    assert (tmp_path / "died").exists() and len(result.failures) == 1, result.failures
    assert list(result.metrics_dataframe["epoch"]) == [0, 1, 2]  # epoch 0 kept, not trained again
    assert len(set(value["hashes"])) == 1, value["hashes"]
    # Model and optimizer shards restored exactly: the weights of the run that never failed.
    assert value["hashes"] == whole["hashes"], (value["hashes"], whole["hashes"])


def test_zero3_on_ranks_whose_earlier_runs_differ(warm, tmp_path):
    # Two workers run ZeRO-3, then all four: DeepSpeed numbers ZeRO-3's modules from a
    # process-wide counter, which raynb restarts with each new group (and its cached
    # subgroups of the old group are dropped).
    _run(tmp_path / "two", stage=3, epochs=1, workers=2)
    result, value = _run(tmp_path / "four", stage=3, epochs=1, workers=4)
    assert value["root_ds_id"] == 0 and len(set(value["hashes"])) == 1, value
    assert result.error is None


def _lightning_deepspeed(config):
    import lightning.pytorch as pl
    import torch

    from raynb.train.lightning import RayDeepSpeedStrategy, RayLightningEnvironment

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch, _):
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(32, 4))
    trainer = pl.Trainer(
        max_epochs=1,
        devices="auto",
        accelerator="auto",
        strategy=RayDeepSpeedStrategy(stage=2),
        plugins=[RayLightningEnvironment()],
        enable_checkpointing=False,
        logger=False,
        enable_progress_bar=False,
    )
    trainer.fit(Tiny(), train_dataloaders=torch.utils.data.DataLoader(data, batch_size=8))


def test_lightning_deepspeed_strategy_on_cpu_ranks_names_the_fix(warm, tmp_path):
    pytest.importorskip("lightning")
    from raynb.errors import RunError

    with pytest.raises(RunError) as info:
        _run(tmp_path, fn=_lightning_deepspeed, workers=1)  # one rank: the check is before any group use
    message = str(info.value)
    assert "RayDeepSpeedStrategy needs GPU ranks" in message and "deepspeed.initialize" in message, message


def test_lightning_deepspeed_strategy_without_deepspeed_names_the_extra():
    import subprocess

    pytest.importorskip("lightning")
    code = (
        "import sys; sys.modules['deepspeed'] = None\n"
        "from raynb.train.lightning import RayDeepSpeedStrategy\nRayDeepSpeedStrategy()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and 'pip install "raynb[deepspeed]"' in out.stderr, out.stderr[-800:]
