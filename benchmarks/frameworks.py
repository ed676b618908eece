"""Frameworks on warm ranks: first fit and warm re-run against the framework's own fresh launch.
Prints JSON.

On a private cluster of 2 warm workers (its own temporary ``RAYNB_HOME``, stopped and removed at
the end), for each framework: ``first_fit_s`` (the cluster's first fit of it: the framework is
imported into the workers then), ``warm_rerun_s`` (median of ``--repeats`` re-runs of the same
fit), and ``fresh_launch_s``: the same training launched fresh as its users do without raynb
(``torchrun --nproc_per_node 2`` of a script for Lightning's ``strategy="ddp"``, Transformers'
``Trainer``, FSDP and DeepSpeed; one fresh ``python`` process for LightGBM), median of ``--repeats``.
``speedup`` is fresh_launch_s / warm_rerun_s. Horovod has no launch to compare with here
(it does not build against this torch): raynb's figures only.

Usage::

    python -m benchmarks.frameworks                 # 3 repeats
    python -m benchmarks.frameworks --quick         # 1 repeat
    python -m benchmarks.frameworks --only lightning
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks._common import machine_info, private_cluster, raynb_cli, torchrun_cli  # noqa: E402

WORKERS = 2

# The model and data of each framework's fit, shared by the raynb function and the fresh script.
LIGHTNING_BODY = """
import lightning.pytorch as pl, torch
from torch.utils.data import DataLoader, TensorDataset
class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__(); self.net = torch.nn.Linear(8, 1)
    def training_step(self, batch, _):
        x, y = batch; loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False, sync_dist=True); return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
g = torch.Generator().manual_seed(0); x = torch.randn(256, 8, generator=g); y = x.sum(dim=1, keepdim=True)
loader = DataLoader(TensorDataset(x, y), batch_size=32)
common = dict(max_epochs=2, accelerator="cpu", enable_progress_bar=False, enable_model_summary=False,
              logger=False, enable_checkpointing=False)
"""
TRANSFORMERS_BODY = """
import tempfile, torch, transformers
ids = (torch.randint(0, 64, (64, 1), generator=torch.Generator().manual_seed(0)) + torch.arange(16)) % 64
data = [{"input_ids": r, "labels": r} for r in ids]
model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32,
                                                             n_layer=2, n_head=2))
out = tempfile.mkdtemp()
args = transformers.TrainingArguments(output_dir=out, per_device_train_batch_size=8, num_train_epochs=1,
                                      report_to=[], use_cpu=True, disable_tqdm=True, save_strategy="no",
                                      logging_strategy="epoch")
"""
FSDP_BODY = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
"""
FSDP_STEPS = """
opt = torch.optim.SGD(model.parameters(), lr=0.05); x = torch.randn(128, 16)
for _ in range(5):
    loss = torch.nn.functional.mse_loss(model(x), x[:, :1]); opt.zero_grad(); loss.backward(); opt.step()
"""
# ZeRO-3 with a torch optimizer (nothing compiled). The fresh launch turns off DeepSpeed's shm
# all-reduce op as raynb's workers do (else its first launch compiles it with g++).
DEEPSPEED_BODY = """
import deepspeed, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=0.01),
                                       config={"train_micro_batch_size_per_gpu": 16,
                                               "zero_optimization": {"stage": 3}})
x = torch.randn(128, 16)
for i in range(0, 128, 16):
    loss = torch.nn.functional.mse_loss(engine(x[i:i + 16]), x[i:i + 16, :1]); engine.backward(loss); engine.step()
"""
FRESH = {
    "deepspeed": "import deepspeed.ops\ndeepspeed.ops.__compatible_ops__['deepspeed_shm_comm'] = False\n"
    + DEEPSPEED_BODY,
    "lightning": LIGHTNING_BODY
    + "pl.Trainer(devices=2, strategy='ddp', **common).fit(Regression(), loader)\n",
    "transformers": TRANSFORMERS_BODY
    + "transformers.Trainer(model=model, args=args, train_dataset=data).train()\n",
    "fsdp": "import torch.distributed as dist\ndist.init_process_group('gloo')\n"
    + FSDP_BODY
    + "from torch.distributed.fsdp import fully_shard\nfor m in model.children():\n"
    "    if list(m.parameters()): fully_shard(m)\nfully_shard(model)\n"
    + FSDP_STEPS
    + "dist.destroy_process_group()\n",
}


def lightning_fn():
    scope: dict = {}
    exec(LIGHTNING_BODY, scope)
    from raynb.train.lightning import RayDDPStrategy, RayLightningEnvironment, RayTrainReportCallback

    pl = scope["pl"]
    pl.Trainer(
        devices="auto",
        strategy=RayDDPStrategy(),
        plugins=[RayLightningEnvironment()],
        callbacks=[RayTrainReportCallback()],
        **scope["common"],
    ).fit(scope["Regression"](), scope["loader"])


def transformers_fn():
    scope: dict = {}
    exec(TRANSFORMERS_BODY, scope)
    from raynb.train.huggingface.transformers import prepare_trainer

    t = scope["transformers"].Trainer(model=scope["model"], args=scope["args"], train_dataset=scope["data"])
    prepare_trainer(t).train()
    import raynb.train

    raynb.train.report({"done": 1})


def fsdp_fn():
    scope: dict = {}
    exec(FSDP_BODY, scope)
    from raynb.train.torch import prepare_model

    scope["model"] = prepare_model(scope["model"], parallel_strategy="fsdp")
    exec(FSDP_STEPS, scope)


def deepspeed_fn():
    exec(DEEPSPEED_BODY, {})


def horovod_fn():
    import horovod.torch as hvd
    import torch

    hvd.init()
    model = torch.nn.Linear(8, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x = torch.randn(64, 8)
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True)).backward()
        opt.step()


def _lightgbm_frames():
    from sklearn.datasets import load_breast_cancer

    df = load_breast_cancer(as_frame=True).frame.rename(columns=lambda c: c.replace(" ", "_"))
    return df.iloc[:400], df.iloc[400:]


LGB_PARAMS = {"objective": "binary", "metric": "binary_logloss", "num_leaves": 15, "verbose": -1}
LGB_FRESH = f"""
import lightgbm
from sklearn.datasets import load_breast_cancer
df = load_breast_cancer(as_frame=True).frame.rename(columns=lambda c: c.replace(" ", "_"))
tr, va = df.iloc[:400], df.iloc[400:]
d = lightgbm.Dataset(tr.drop(columns="target"), label=tr["target"])
v = lightgbm.Dataset(va.drop(columns="target"), label=va["target"], reference=d)
lightgbm.train({LGB_PARAMS!r}, d, 20, valid_sets=[v])
"""


def _trainer(name: str):
    from raynb.train import RunConfig, ScalingConfig
    from raynb.train.torch import TorchTrainer

    sc, rc = ScalingConfig(num_workers=WORKERS), RunConfig(verbose=0)
    if name == "lightgbm":
        from raynb.train.lightgbm import LightGBMTrainer

        train, valid = _lightgbm_frames()
        return LightGBMTrainer(
            params=LGB_PARAMS,
            label_column="target",
            num_boost_round=20,
            datasets={"train": train, "valid": valid},
            scaling_config=sc,
            run_config=rc,
        )
    if name == "horovod":
        from raynb.train.horovod import HorovodTrainer

        return HorovodTrainer(horovod_fn, scaling_config=sc, run_config=rc)
    return TorchTrainer(
        {
            "lightning": lightning_fn,
            "transformers": transformers_fn,
            "fsdp": fsdp_fn,
            "deepspeed": deepspeed_fn,
        }[name],
        scaling_config=sc,
        run_config=rc,
    )


def _timed_fit(trainer) -> float:
    t0 = time.perf_counter()
    result = trainer.fit()
    took = time.perf_counter() - t0
    if result.state != "FINISHED":
        raise RuntimeError(f"the run failed: {result.error}")
    return took


def _fresh(name: str, repeats: int) -> float | None:
    if name == "horovod":
        return None
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, f"fresh_{name}.py")  # not {name}.py: it would shadow the package
        with open(script, "w") as f:
            f.write(LGB_FRESH if name == "lightgbm" else FRESH[name])
        cmd = (
            [sys.executable, script]
            if name == "lightgbm"
            else torchrun_cli() + ["--standalone", f"--nproc_per_node={WORKERS}", script]
        )
        env = dict(os.environ, OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu")
        for _ in range(repeats):
            t0 = time.perf_counter()
            done = subprocess.run(
                cmd,
                cwd=tmp,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                timeout=600,
            )
            if done.returncode:
                raise RuntimeError(
                    f"the fresh {name} launch failed ({done.returncode}): {done.stderr[:3000]}"
                )
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 repeat")
    ap.add_argument(
        "--only",
        action="append",
        choices=["lightning", "transformers", "lightgbm", "fsdp", "deepspeed", "horovod"],
    )
    a = ap.parse_args()
    repeats = 1 if a.quick else a.repeats
    names = a.only or ["lightning", "transformers", "lightgbm", "fsdp", "deepspeed", "horovod"]
    load = os.getloadavg()[0]
    out: dict = {"machine": machine_info(load, workers=WORKERS), "repeats": repeats, "frameworks": {}}
    # The ranks' output (forwarded to this process's stdout) goes to stderr: stdout is the JSON.
    with private_cluster(), contextlib.redirect_stdout(sys.stderr):
        import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        subprocess.run(
            raynb_cli() + ["start", "--workers", str(WORKERS)],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=300,
        )
        import raynb

        raynb.connect()
        for name in names:
            first = _timed_fit(_trainer(name))
            warm = statistics.median(_timed_fit(_trainer(name)) for _ in range(repeats))
            fresh = _fresh(name, repeats)
            out["frameworks"][name] = {
                "first_fit_s": round(first, 3),
                "warm_rerun_s": round(warm, 3),
                "fresh_launch_s": None if fresh is None else round(fresh, 3),
                "speedup": None if fresh is None else round(fresh / warm, 1),
            }
        raynb.disconnect()
    out["load_avg_1m_at_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
