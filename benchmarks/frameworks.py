"""Frameworks on warm ranks: first fit and warm re-run against the framework's own fresh launch.
Prints JSON.

On a private cluster of 2 warm workers (its own temporary ``RAYNB_HOME``, stopped and removed at
the end), for each framework: ``first_fit_s`` (the cluster's first fit of it: the framework is
imported into the workers then), ``warm_rerun_s`` (median of ``--repeats`` re-runs of the same
fit), and ``fresh_launch_s``: the same training launched fresh as its users do without raynb
(``torchrun --nproc_per_node 2`` of a script for Lightning's ``strategy="ddp"``, Transformers'
``Trainer``, FSDP and DeepSpeed; one fresh ``python`` process for LightGBM), median of ``--repeats``.
TensorFlow's fresh launch is a pair of ``python`` processes with ``TF_CONFIG`` (how
``MultiWorkerMirroredStrategy``'s users start it); its ``import_in_rank_s`` says what importing
TensorFlow cost rank 0 in the first fit and in the warm re-run (nothing: the warm worker kept it).
``speedup`` is fresh_launch_s / warm_rerun_s. Unless ``--quick`` or ``--skip-ray``,
``ray_train`` has Ray Train's own ``TorchTrainer`` with Lightning and Transformers and its
``TensorflowTrainer`` on a local Ray cluster: first fit and the next fits (``second_fit_s``,
median), and ``over_raynb_warm`` = second_fit_s / raynb's warm_rerun_s. Horovod has no launch to compare with here
(it does not build against this torch): raynb's figures only.

Usage::

    python -m benchmarks.frameworks                 # 3 repeats
    python -m benchmarks.frameworks --quick         # 1 repeat
    python -m benchmarks.frameworks --only lightning
    python -m benchmarks.frameworks --only tensorflow --skip-ray
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

from benchmarks._common import machine_info, private_cluster, raynb_cli, torchrun_cli

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
# tf-keras Model.fit under MultiWorkerMirroredStrategy; ``import_s``: what importing
# TensorFlow cost the rank (nothing on a warm rank, which keeps it imported).
TENSORFLOW_BODY = """
import time
t0 = time.perf_counter()
import numpy as np, tensorflow as tf
import_s = time.perf_counter() - t0
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(4,)),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
rng = np.random.default_rng(0); x = rng.normal(size=(256, 4)).astype("float32"); y = x.sum(axis=1, keepdims=True)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(32).with_options(options), epochs=2, verbose=0)
"""
FRESH = {
    "tensorflow": TENSORFLOW_BODY,
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


def tensorflow_fn():
    scope: dict = {}
    exec(TENSORFLOW_BODY, scope)
    import raynb.train

    raynb.train.report({"import_s": scope["import_s"]})


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
    if name == "tensorflow":
        from raynb.train.tensorflow import TensorflowTrainer

        return TensorflowTrainer(tensorflow_fn, scaling_config=sc, run_config=rc)
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


def _timed_fit(trainer, seen: dict | None = None) -> float:
    """The fit's wall time (s); its last metrics go into ``seen`` when given."""
    t0 = time.perf_counter()
    result = trainer.fit()
    took = time.perf_counter() - t0
    if getattr(result, "error", None) is not None or getattr(result, "state", "FINISHED") != "FINISHED":
        raise RuntimeError(f"the run failed: {result.error}")
    if seen is not None:
        seen.update(result.metrics or {})
    return took


def _run_fresh(cmds: list, cwd: str, envs: list, name: str) -> float:
    """Start ``cmds`` together (one process each, with ``envs``), wait for all; wall time (s)."""
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for cmd, env in zip(cmds, envs)
    ]
    errors = [p.communicate(timeout=600)[1] for p in procs]
    took = time.perf_counter() - t0
    for p, err in zip(procs, errors):
        if p.returncode:
            raise RuntimeError(f"the fresh {name} launch failed ({p.returncode}): {err[-3000:]}")
    return took


def _tf_pair_envs(env: dict) -> list:
    """A fresh TF process pair's environments: TF_CONFIG on two free loopback ports, tf-keras."""
    import socket

    ports = []
    for _ in range(WORKERS):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    return [
        dict(
            env,
            TF_USE_LEGACY_KERAS="1",
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
        )
        for i in range(WORKERS)
    ]


def _fresh(name: str, repeats: int) -> float | None:
    if name == "horovod":
        return None
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, f"fresh_{name}.py")  # not {name}.py: it would shadow the package
        with open(script, "w") as f:
            f.write(LGB_FRESH if name == "lightgbm" else FRESH[name])
        env = dict(os.environ, OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu")
        for _ in range(repeats):
            if name == "tensorflow":  # a fresh TF process pair, as MultiWorkerMirroredStrategy's users run
                envs = _tf_pair_envs(env)
                times.append(_run_fresh([[sys.executable, script]] * WORKERS, tmp, envs, name))
                continue
            cmd = (
                [sys.executable, script]
                if name == "lightgbm"
                else torchrun_cli() + ["--standalone", f"--nproc_per_node={WORKERS}", script]
            )
            times.append(_run_fresh([cmd], tmp, [env], name))
    return statistics.median(times)


# Ray Train 2.60's side: the same fits through Ray's trainers on a local Ray cluster.
RAY_FRAMEWORKS = ("lightning", "transformers", "tensorflow")


def ray_lightning_fn():
    scope: dict = {}
    exec(LIGHTNING_BODY, scope)
    from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment, RayTrainReportCallback

    scope["pl"].Trainer(
        devices="auto",
        strategy=RayDDPStrategy(),
        plugins=[RayLightningEnvironment()],
        callbacks=[RayTrainReportCallback()],
        **scope["common"],
    ).fit(scope["Regression"](), scope["loader"])


def ray_transformers_fn():
    scope: dict = {}
    exec(TRANSFORMERS_BODY, scope)
    from ray.train.huggingface.transformers import prepare_trainer

    t = scope["transformers"].Trainer(model=scope["model"], args=scope["args"], train_dataset=scope["data"])
    prepare_trainer(t).train()


def ray_tensorflow_fn():
    exec(TENSORFLOW_BODY, {})  # tf-keras: TF_USE_LEGACY_KERAS=1 in the workers' runtime_env


def _ray_trainer(name: str, storage: str):
    import ray.train

    sc = ray.train.ScalingConfig(num_workers=WORKERS)
    rc = ray.train.RunConfig(storage_path=storage)
    if name == "tensorflow":
        from ray.train.tensorflow import TensorflowTrainer

        return TensorflowTrainer(ray_tensorflow_fn, scaling_config=sc, run_config=rc)
    from ray.train.torch import TorchTrainer

    fn = {"lightning": ray_lightning_fn, "transformers": ray_transformers_fn}[name]
    return TorchTrainer(fn, scaling_config=sc, run_config=rc)


def measure_ray(names: list, repeats: int) -> dict:
    """Ray Train's first fit and its next fits (median of ``repeats``) of each framework, on a
    local Ray cluster of our own (loopback; its temp dir removed). Ray starts each fit's
    worker actors anew, so every fit imports the framework again."""
    import shutil

    import ray

    tmp = tempfile.mkdtemp(prefix="rb-", dir="/tmp")  # ray's socket paths must stay short
    out: dict = {}
    try:
        for attempt in range(2):  # Ray gives its raylet 30 s to start: a loaded machine misses it
            try:
                ray.init(
                    num_cpus=WORKERS + 1,
                    _temp_dir=tmp,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                    _node_ip_address="127.0.0.1",
                    # tf-keras: Ray's TensorFlow backend imports TensorFlow before the function runs
                    runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "TF_USE_LEGACY_KERAS": "1"}},
                )
                break
            except Exception as e:  # noqa: BLE001 - recorded in the JSON, not fatal to raynb's figures
                ray.shutdown()
                if attempt:
                    return {"error": f"ray.init failed twice: {e}"}
        try:
            for name in names:
                storage = os.path.join(tmp, "results")
                try:
                    first = _timed_fit(_ray_trainer(name, storage))
                    again = statistics.median(_timed_fit(_ray_trainer(name, storage)) for _ in range(repeats))
                except Exception as e:  # noqa: BLE001 - one framework's failure is recorded, not fatal
                    out[name] = {"error": f"{type(e).__name__}: {str(e)[-500:]}"}
                    continue
                out[name] = {"first_fit_s": round(first, 3), "second_fit_s": round(again, 3)}
            out["version"] = ray.__version__
        finally:
            ray.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def measure_raynb(names: list, repeats: int) -> dict:
    """raynb's figures of each framework on a private 2-worker cluster (see the module doc)."""
    figures: dict = {}
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
            first_seen, warm_seen = {}, {}
            first = _timed_fit(_trainer(name), first_seen)
            warm = statistics.median(_timed_fit(_trainer(name), warm_seen) for _ in range(repeats))
            fresh = _fresh(name, repeats)
            figures[name] = {
                "first_fit_s": round(first, 3),
                "warm_rerun_s": round(warm, 3),
                "fresh_launch_s": None if fresh is None else round(fresh, 3),
                "speedup": None if fresh is None else round(fresh / warm, 1),
            }
            if "import_s" in first_seen:  # what importing the framework cost rank 0
                figures[name]["import_in_rank_s"] = {
                    "first_fit": round(first_seen["import_s"], 3),
                    "warm_rerun": round(warm_seen["import_s"], 4),
                }
        raynb.disconnect()
    return figures


ALL = ("lightning", "transformers", "lightgbm", "fsdp", "deepspeed", "tensorflow", "horovod")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 repeat")
    ap.add_argument(
        "--only",
        action="append",
        choices=ALL,
    )
    ap.add_argument("--skip-ray", action="store_true", help="no Ray Train side (--quick skips it too)")
    ap.add_argument("--ray-only", action="store_true", help="only Ray Train's side (no raynb cluster)")
    a = ap.parse_args()
    repeats = 1 if a.quick else a.repeats
    names = a.only or list(ALL)
    load = os.getloadavg()[0]
    out: dict = {"machine": machine_info(load, workers=WORKERS), "repeats": repeats, "frameworks": {}}
    if not a.ray_only:
        out["frameworks"] = measure_raynb(names, repeats)
    print(json.dumps(out["frameworks"]), file=sys.stderr)  # raynb's figures, should Ray's side fail
    ray_names = [n for n in names if n in RAY_FRAMEWORKS]
    if ray_names and not (a.quick or a.skip_ray):
        with contextlib.redirect_stdout(sys.stderr):
            out["ray_train"] = measure_ray(ray_names, repeats)
        for name, figures in out["ray_train"].items():
            if name in out["frameworks"] and isinstance(figures, dict) and "second_fit_s" in figures:
                figures["over_raynb_warm"] = round(
                    figures["second_fit_s"] / out["frameworks"][name]["warm_rerun_s"], 1
                )
    out["load_avg_1m_at_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
