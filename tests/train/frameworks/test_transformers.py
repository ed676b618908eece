"""Hugging Face Transformers and Accelerate on raynb's warm ranks: a Trainer on a tiny
GPT-2 built from a config (no download) sees raynb's world, trains over the existing group
with identical weights on both ranks, and its logs and saves come back as raynb metrics and
checkpoints; ``accelerate.Accelerator()`` in a function sees the same world; a warm second
fit is faster than the first."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import cloudpickle
import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from raynb.train import RunConfig, ScalingConfig  # noqa: E402
from raynb.train.torch import TorchTrainer  # noqa: E402

pytestmark = pytest.mark.transformers
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _digests_on_every_rank(params):
    """Every rank's sha256 (8 bytes, hex) of its parameters, gathered over the group."""
    import hashlib

    import torch
    import torch.distributed as dist

    flat = torch.cat([p.detach().float().flatten() for p in params])
    mine = torch.tensor(list(hashlib.sha256(flat.numpy().tobytes()).digest()[:8]), dtype=torch.uint8)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return [bytes(t.tolist()).hex() for t in every]


def _tokens(n=128, length=16, vocab=64):
    import torch

    g = torch.Generator().manual_seed(0)
    # A learnable pattern: each sequence counts up from a random start, modulo the vocabulary.
    start = torch.randint(0, vocab, (n, 1), generator=g)
    return (start + torch.arange(length)) % vocab


def _hf_train(config):
    import os

    import torch
    import transformers

    import raynb.train as train
    from raynb.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer

    ids = _tokens()

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return len(ids)

        def __getitem__(self, i):
            return {"input_ids": ids[i], "labels": ids[i]}

    torch.manual_seed(train.get_context().get_world_rank())  # different inits: DDP broadcasts rank 0's
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    )
    args = transformers.TrainingArguments(
        output_dir=config["out"],
        per_device_train_batch_size=8,
        num_train_epochs=config["epochs"],
        learning_rate=5e-3,
        logging_strategy="epoch",
        save_strategy="epoch",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
        save_only_model=True,
    )
    extra = [_die_in_epoch_1(transformers, config["marker"])] if "marker" in config else []
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=Tokens(), callbacks=[RayTrainReportCallback()] + extra
    )
    trainer = prepare_trainer(trainer)
    ckpt = train.get_checkpoint()
    resume = os.path.join(ckpt.path, RayTrainReportCallback.CHECKPOINT_NAME) if ckpt else None
    trainer.train(resume_from_checkpoint=resume)
    return {
        "world": args.world_size,
        "rank": args.process_index,
        "local_rank": args.local_process_index,
        "hashes": _digests_on_every_rank(model.parameters()),
        "steps": trainer.state.global_step,
    }


def _die_in_epoch_1(transformers, marker):
    """A callback that kills rank 1 after the first step of epoch 1 (the second), once:
    mid-epoch, as a preemption would, not the instant after the epoch's report (which a
    death within a millisecond may take along: ``report`` is at least once)."""
    import os

    import raynb.train as train

    class Die(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if (
                state.epoch
                and state.epoch > 1
                and train.get_context().get_world_rank() == 1
                and not os.path.exists(marker)
            ):
                open(marker, "w").close()
                os._exit(3)

    return Die()


def _run(tmp_path, fn=_hf_train, workers=2, epochs=2, **run):
    from raynb.train.fit_run import execute_run

    cfg = {"out": str(tmp_path / "hf_out"), "epochs": epochs, **run.pop("config", {})}
    trainer = TorchTrainer(
        fn,
        train_loop_config=cfg,
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path / "runs"), **run),
    )
    return execute_run(
        trainer.train_loop_per_worker, trainer.train_loop_config, trainer.scaling_config, trainer.run_config
    )


def test_warm_second_fit_is_faster_than_the_first(warm, tmp_path):
    # First in the file, on all 4 workers: the first fit imports transformers into each.
    t0 = time.perf_counter()
    _run(tmp_path / "a", workers=4, epochs=1)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    _run(tmp_path / "b", workers=4, epochs=1)
    second = time.perf_counter() - t0
    assert second < first, (first, second)


def test_trainer_sees_raynb_world_and_reports_metrics_and_checkpoints(warm, tmp_path):
    result, value = _run(tmp_path)
    assert (value["world"], value["rank"], value["local_rank"]) == (2, 0, 0)
    assert value["steps"] == 16  # 128 sequences / 2 ranks / 8 a batch, 2 epochs: each rank its half
    assert len(set(value["hashes"])) == 1, value["hashes"]
    df = result.metrics_dataframe
    assert len(df) == 2 and list(df["epoch"]) == [1.0, 2.0]
    assert df["loss"].iloc[-1] < df["loss"].iloc[0], list(df["loss"])
    files = {p.name for p in (Path(result.checkpoint.path) / "checkpoint").iterdir()}
    assert "model.safetensors" in files and "trainer_state.json" in files, files


def test_restored_run_resumes_from_the_trainer_checkpoint(warm, tmp_path):
    result, _ = _run(tmp_path, epochs=1)
    resumed = TorchTrainer.restore(
        result.path, train_loop_config={"out": str(tmp_path / "hf_out2"), "epochs": 2}
    ).fit()
    assert list(resumed.metrics_dataframe["epoch"]) == [1.0, 2.0]
    assert resumed.metrics["step"] == 16


def test_rank_killed_in_epoch_2_resumes_from_the_trainer_checkpoint(warm, tmp_path):
    from raynb.train import FailureConfig

    result, value = _run(
        tmp_path, config={"marker": str(tmp_path / "died")}, failure_config=FailureConfig(max_failures=1)
    )
    assert (tmp_path / "died").exists() and len(result.failures) == 1, result.failures
    assert list(result.metrics_dataframe["epoch"]) == [1.0, 2.0]  # epoch 1 kept, not trained again
    assert value["steps"] == 16 and len(set(value["hashes"])) == 1


def _accelerate(config):
    import accelerate
    import torch

    import raynb.train as train

    acc = accelerate.Accelerator(cpu=True)
    torch.manual_seed(train.get_context().get_world_rank())
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 4, generator=g)
    y = x.sum(dim=1, keepdim=True)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    model, opt, loader = acc.prepare(model, opt, loader)
    for epoch in range(3):
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            acc.backward(loss)
            opt.step()
        train.report({"epoch": epoch, "loss": acc.gather(loss.detach()).mean().item()})
    return {
        "world": acc.num_processes,
        "rank": acc.process_index,
        "batches": len(loader),
        "hashes": _digests_on_every_rank(acc.unwrap_model(model).parameters()),
    }


def test_accelerator_in_a_function_uses_the_raynb_group(warm, tmp_path):
    result, value = _run(tmp_path, fn=_accelerate)
    assert (value["world"], value["rank"], value["batches"]) == (2, 0, 8)
    assert len(set(value["hashes"])) == 1, value["hashes"]
    losses = list(result.metrics_dataframe["loss"])
    assert losses[-1] < losses[0], losses


def test_without_transformers_the_error_names_the_extra():
    import subprocess

    code = "import sys; sys.modules['transformers'] = None\nimport raynb.train.huggingface.transformers"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and 'pip install "raynb[transformers]"' in out.stderr, out.stderr[-800:]
