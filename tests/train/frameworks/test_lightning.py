"""PyTorch Lightning on raynb's warm ranks: a 2-rank fit over the existing process group
(identical parameters on every rank, falling loss), its metrics and checkpoints as raynb's,
a restored run resuming from them, a Trainer that would launch processes named, and a warm
second fit faster than the first."""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest

pytest.importorskip("lightning")

from raynb.train import RunConfig, ScalingConfig  # noqa: E402
from raynb.train.torch import TorchTrainer  # noqa: E402

pytestmark = pytest.mark.lightning
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _fit(config):
    import hashlib
    import os

    import lightning.pytorch as pl
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset

    import raynb.train as train
    from raynb.train.lightning import (
        RayDDPStrategy,
        RayFSDPStrategy,
        RayLightningEnvironment,
        RayTrainReportCallback,
        prepare_trainer,
    )

    class Regression(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

        def training_step(self, batch, _):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss, on_epoch=True, on_step=False, sync_dist=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(512, 1, generator=g)
    torch.manual_seed(train.get_context().get_world_rank())  # different initial weights: DDP syncs them
    trainer = pl.Trainer(
        max_epochs=config["epochs"],
        devices="auto",
        accelerator="cpu",
        strategy=RayFSDPStrategy() if config.get("fsdp") else RayDDPStrategy(),
        plugins=[RayLightningEnvironment()],
        callbacks=[RayTrainReportCallback()]
        + ([_die_in_epoch_2(pl, config["marker"])] if "marker" in config else []),
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
    )
    trainer = prepare_trainer(trainer)
    model = Regression()
    ckpt, ckpt_path = train.get_checkpoint(), None
    if ckpt is not None:
        ckpt_path = os.path.join(ckpt.path, RayTrainReportCallback.CHECKPOINT_NAME)
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True), ckpt_path=ckpt_path)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    mine = torch.tensor(list(hashlib.sha256(flat.numpy().tobytes()).digest()[:8]), dtype=torch.uint8)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return {
        "hashes": [bytes(t.tolist()).hex() for t in every],
        "world": trainer.world_size,
        "rank": trainer.global_rank,
        "batches": trainer.num_training_batches,
        "start_epoch": 0 if ckpt is None else "resumed",
        "group_is_raynb": dist.is_initialized(),
    }


def _run(tmp_path, epochs=4, workers=2, fn=_fit, fsdp=False, **run):
    from raynb.train.fit_run import execute_run

    trainer = TorchTrainer(
        fn,
        train_loop_config={"epochs": epochs, "fsdp": fsdp},
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path), **run),
    )
    return execute_run(
        trainer.train_loop_per_worker, trainer.train_loop_config, trainer.scaling_config, trainer.run_config
    )


def test_warm_second_fit_is_faster_than_the_first(warm, tmp_path):
    # First in the file, on all 4 workers: the first fit imports Lightning into each.
    t0 = time.perf_counter()
    _run(tmp_path / "a", epochs=1, workers=4)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    _run(tmp_path / "b", epochs=1, workers=4)
    second = time.perf_counter() - t0
    assert second < first, (first, second)


def test_two_rank_fit_identical_parameters_and_falling_loss(warm, tmp_path):
    result, value = _run(tmp_path)
    assert value["world"] == 2 and value["rank"] == 0
    assert value["batches"] == 8  # 512 rows / 2 ranks / 32 a batch: each rank its half
    assert len(set(value["hashes"])) == 1, value["hashes"]
    losses = list(result.metrics_dataframe["train_loss"])
    assert len(losses) == 4 and losses[-1] < 0.5 * losses[0], losses
    assert result.metrics["epoch"] == 3 and result.metrics["step"] == 32
    names = sorted(p.name for p in __import__("pathlib").Path(result.checkpoint.path).iterdir())
    assert names == ["checkpoint.ckpt"], names


def test_ray_fsdp_strategy_on_cpu_ranks_names_the_alternatives(warm, tmp_path):
    from raynb.errors import RunError

    with pytest.raises(RunError, match="RayFSDPStrategy needs GPU ranks.*RayDDPStrategy"):
        _run(tmp_path, fsdp=True, epochs=1)


def test_restored_run_resumes_from_the_lightning_checkpoint(warm, tmp_path):
    result, _ = _run(tmp_path, epochs=2)
    trainer = TorchTrainer.restore(result.path, train_loop_config={"epochs": 4})
    resumed = trainer.fit()
    epochs = list(resumed.metrics_dataframe["epoch"])
    assert epochs == [0, 1, 2, 3], epochs  # epochs 2 and 3 only, after the first run's 0 and 1
    assert resumed.metrics["step"] == 32


def _die_in_epoch_2(pl, marker):
    """A callback that kills rank 1 after the first batch of epoch 2, once (``marker``
    records it): mid-epoch, as a preemption would, not the instant after the epoch's report
    (which a death within a millisecond may take along: ``report`` is at least once)."""
    import os

    import raynb.train as train

    class Die(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if (
                trainer.current_epoch == 2
                and train.get_context().get_world_rank() == 1
                and not os.path.exists(marker)
            ):
                open(marker, "w").close()
                os._exit(3)

    return Die()


def test_rank_killed_in_epoch_2_restarts_from_the_lightning_checkpoint(warm, tmp_path):
    from raynb.train import FailureConfig

    trainer = TorchTrainer(
        _fit,
        train_loop_config={"epochs": 4, "marker": str(tmp_path / "died")},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            verbose=0, storage_path=str(tmp_path), failure_config=FailureConfig(max_failures=1)
        ),
    )
    result = trainer.fit()
    assert (tmp_path / "died").exists() and result.state == "FINISHED"
    assert len(result.failures) == 1, result.failures
    epochs = list(result.metrics_dataframe["epoch"])
    assert epochs == [0, 1, 2, 3], epochs  # epochs 0 and 1 not trained again
    assert result.metrics["step"] == 32


def _bad_trainer(config):
    import lightning.pytorch as pl  # raynb.train.lightning is not imported: the hook checks

    pl.Trainer(accelerator="cpu", **config["kwargs"])


@pytest.mark.parametrize(
    "kwargs,named", [({"strategy": "ddp"}, "strategy='ddp'"), ({"devices": 4}, "devices=4")]
)
def test_a_trainer_that_would_launch_processes_is_named(warm, tmp_path, kwargs, named):
    from raynb.errors import RunError

    trainer = TorchTrainer(
        _bad_trainer,
        train_loop_config={"kwargs": kwargs},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
    )
    with pytest.raises(RunError) as info:
        trainer.fit()
    text = str(info.value)
    assert named in text and "RayDDPStrategy()" in text and 'devices="auto"' in text, text


def test_without_lightning_the_error_names_the_extra(tmp_path):
    import subprocess

    code = (
        "import sys; sys.modules['lightning'] = None; sys.modules['pytorch_lightning'] = None\n"
        "import raynb.train.lightning"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and 'pip install "raynb[lightning]"' in out.stderr, out.stderr[-800:]


def test_with_only_pytorch_lightning_the_classes_are_its_own():
    import subprocess

    code = (
        "import sys; sys.modules['lightning'] = None\n"
        "import raynb.train.lightning as rl, pytorch_lightning as pl\n"
        "assert issubclass(rl.RayDDPStrategy, pl.strategies.DDPStrategy)\n"
        "assert issubclass(rl.RayLightningEnvironment, pl.plugins.environments.LightningEnvironment)\n"
        "assert issubclass(rl.RayTrainReportCallback, pl.Callback)\n"
        "assert pl.Trainer.__init__._raynb_checked\n"
        "print('ok')"
    )
    pytest.importorskip("pytorch_lightning")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-800:]
