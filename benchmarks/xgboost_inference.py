"""XGBoost training and batch inference: raynb against one process (and Ray Train). Prints JSON.

Measured side by side in one run, on a private cluster of 2 warm workers (its own temporary
``RAYNB_HOME`` / ``RAYNB_STORAGE_PATH``, stopped and removed at the end):

- ``train_per_round_ms``: a boosting round of ``XGBoostTrainer`` on 2 ranks (one thread
  each) against ``xgboost.train`` in this process with the same 2 threads in total (and
  with 1); from the rounds' report times, median over ``--repeats`` alternating runs;
- ``first_round_s``: submit -> first round reported, of a small ``XGBoostTrainer`` run on
  the warm workers (``warm``), against a fresh ``python`` process that imports xgboost,
  builds the same matrix and reports its first round (``cold_process``, median of
  ``--repeats``), and against the
  first fit on a just-started cluster (``cold_cluster``: ``raynb start`` included);
  ``xgboost_import_s`` is the import alone, in a fresh process (what the zygote saves);
- ``inference_rows_per_s``: ``Dataset.map_batches(Predictor, num_workers=2)`` over parquet
  files against one process reading them with pandas and predicting;
- ``ray``: the same training through ``ray.train.xgboost.XGBoostTrainer`` on a local Ray
  cluster (``ray.init`` with its own temp dir, shut down at the end), when ray is installed:
  fit() -> first round, and per round.

Usage::

    python -m benchmarks.xgboost_inference            # 200k rows, 3 repeats
    python -m benchmarks.xgboost_inference --quick    # smoke test (20k rows, 1 repeat)
    python -m benchmarks.xgboost_inference --skip-ray
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks._common import machine_info, private_cluster  # noqa: E402

PARAMS = {
    "objective": "binary:logistic",
    "eval_metric": "logloss",
    "tree_method": "hist",
    "max_depth": 6,
    "eta": 0.3,
    "seed": 0,
}

COLD_SCRIPT = """
import sys, time
t0 = float(sys.argv[1])
import numpy as np, pandas as pd, xgboost
df = pd.read_parquet(sys.argv[2])
d = xgboost.QuantileDMatrix(df.drop(columns="y"), label=df["y"])
class First(xgboost.callback.TrainingCallback):
    def after_iteration(self, model, epoch, log):
        print(time.time() - t0, flush=True)
        return True
xgboost.train({"objective": "binary:logistic", "nthread": 1}, d, 5, callbacks=[First()])
"""


def make_data(rows: int, root: str) -> tuple[str, str]:
    import numpy as np
    import pandas as pd
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=rows, n_features=20, n_informative=8, random_state=0)
    df = pd.DataFrame(X.astype(np.float32), columns=[f"f{i}" for i in range(20)]).assign(y=y)
    train_dir = os.path.join(root, "train")
    os.makedirs(train_dir)
    for i in range(4):
        df.iloc[i * rows // 4 : (i + 1) * rows // 4].to_parquet(
            os.path.join(train_dir, f"part-{i}.parquet"), row_group_size=max(1000, rows // 16)
        )
    small = os.path.join(root, "small.parquet")
    df.iloc[:2000].to_parquet(small)
    return train_dir, small


def per_round_single(df, rounds: int, nthread: int) -> float:
    """Seconds per round of xgboost.train in this process (rounds 2.. end, from a callback)."""
    import xgboost

    stamps = []

    class Stamp(xgboost.callback.TrainingCallback):
        def after_iteration(self, model, epoch, log):
            stamps.append(time.perf_counter())
            return False

    d = xgboost.QuantileDMatrix(df.drop(columns="y"), label=df["y"])
    xgboost.train(
        dict(PARAMS, nthread=nthread),
        d,
        rounds,
        evals=[(d, "train")],
        callbacks=[Stamp()],
        verbose_eval=False,
    )
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1)


def per_round_raynb(ds, rounds: int, workers: int) -> tuple[float, float]:
    """(seconds per round, seconds from fit() to the first round's report) of XGBoostTrainer."""
    from raynb.train import RunConfig, ScalingConfig
    from raynb.train.xgboost import XGBoostTrainer

    t0 = time.time()
    result = XGBoostTrainer(
        params=PARAMS,
        label_column="y",
        num_boost_round=rounds,
        datasets={"train": ds},
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(verbose=0),
    ).fit()
    ts = list(result.metrics_dataframe["timestamp"])
    return (ts[-1] - ts[0]) / (len(ts) - 1), ts[0] - t0


class Predictor:
    def __init__(self, model_path):
        import xgboost

        self.booster = xgboost.Booster(model_file=model_path)

    def __call__(self, batch):
        import xgboost

        return {"p": self.booster.predict(xgboost.DMatrix(batch.drop(columns="y")))}


def inference(train_dir: str, model_path: str, workers: int) -> tuple[float, float, int]:
    """(rows/s one process, rows/s map_batches on ``workers``, rows)."""
    import numpy as np
    import pandas as pd
    import xgboost

    import raynb.data
    from raynb.train import RunConfig

    files = sorted(os.path.join(train_dir, f) for f in os.listdir(train_dir))
    t0 = time.perf_counter()
    booster = xgboost.Booster(model_file=model_path)
    booster.set_param({"nthread": workers})
    n = sum(len(booster.predict(xgboost.DMatrix(pd.read_parquet(f).drop(columns="y")))) for f in files)
    single = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    out = raynb.data.read_parquet(files).map_batches(
        Predictor,
        batch_size=8192,
        num_workers=workers,
        batch_format="pandas",
        fn_constructor_kwargs={"model_path": model_path},
        run_config=RunConfig(verbose=0),
    )
    got = sum(len(b["p"]) for b in out.iter_batches(batch_size=None))
    dist = got / (time.perf_counter() - t0)
    assert got == n and np.isfinite(dist)
    return single, dist, n


def cold_process(small: str) -> tuple[float, float]:
    """(launch -> first round, import xgboost alone) in fresh processes, seconds."""
    out = subprocess.run(
        [sys.executable, "-c", COLD_SCRIPT, repr(time.time()), small],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    first = float(out.stdout.split()[0])
    imp = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; t = time.perf_counter(); import xgboost; print(time.perf_counter() - t)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return first, float(imp.stdout.strip())


def measure_ray(train_dir: str, rounds: int, workers: int) -> dict:
    """ray.train.xgboost.XGBoostTrainer on a local Ray cluster of our own (its temp dir removed)."""
    import ray

    tmp = tempfile.mkdtemp(prefix="rb-", dir="/tmp")  # ray's socket paths must stay short
    try:
        ray.init(
            num_cpus=workers + 1,
            _temp_dir=tmp,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            _node_ip_address="127.0.0.1",
        )  # loopback only
        try:
            import ray.data
            import ray.train
            from ray.train.xgboost import RayTrainReportCallback, XGBoostTrainer

            def train_fn(config):
                import time as _t

                import xgboost

                shard = ray.train.get_dataset_shard("train").materialize().to_pandas()
                d = xgboost.QuantileDMatrix(shard.drop(columns="y"), label=shard["y"])
                stamps = []

                class Stamp(xgboost.callback.TrainingCallback):
                    def after_iteration(self, model, epoch, log):
                        stamps.append(_t.time())
                        return False

                xgboost.train(
                    dict(config["params"], nthread=1),
                    d,
                    config["rounds"],
                    evals=[(d, "train")],
                    callbacks=[Stamp(), RayTrainReportCallback(frequency=0, checkpoint_at_end=False)],
                    verbose_eval=False,
                )
                if ray.train.get_context().get_world_rank() == 0:
                    with open(config["out"], "w") as f:
                        json.dump(stamps, f)

            out_file = os.path.join(tmp, "stamps.json")
            ds = ray.data.read_parquet(train_dir)
            t0 = time.time()
            XGBoostTrainer(
                train_fn,
                train_loop_config={"params": PARAMS, "rounds": rounds, "out": out_file},
                scaling_config=ray.train.ScalingConfig(num_workers=workers),
                run_config=ray.train.RunConfig(storage_path=os.path.join(tmp, "results")),
                datasets={"train": ds},
            ).fit()
            with open(out_file) as f:
                stamps = json.load(f)
            return {
                "first_round_s": round(stamps[0] - t0, 3),
                "per_round_ms": round(1000 * (stamps[-1] - stamps[0]) / (len(stamps) - 1), 2),
                "version": ray.__version__,
            }
        finally:
            ray.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="20k rows, 1 repeat")
    ap.add_argument("--skip-ray", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.repeats, args.rounds = 20_000, 1, 10
    load0 = os.getloadavg()[0]
    workers = 2
    data = tempfile.mkdtemp(prefix="raynb-bench-xgb-")
    out: dict = {}
    try:
        import pandas as pd

        train_dir, small = make_data(args.rows, data)
        df = pd.concat([pd.read_parquet(os.path.join(train_dir, f)) for f in sorted(os.listdir(train_dir))])
        with private_cluster():
            import raynb
            import raynb.data
            from raynb.cluster.launch import start_cluster

            t0 = time.time()
            start_cluster(num_workers=workers)
            raynb.connect()
            ds_small = raynb.data.read_parquet(small)
            _, cold_cluster = per_round_raynb(ds_small, 3, workers)  # the first fit on new workers
            cold_cluster_total = time.time() - t0
            ds = raynb.data.read_parquet(train_dir)
            single2, single1, dist, warm_first = [], [], [], []
            for _ in range(args.repeats):  # alternating, so a load change hits both sides
                single2.append(per_round_single(df, args.rounds, workers))
                single1.append(per_round_single(df, args.rounds, 1))
                dist.append(per_round_raynb(ds, args.rounds, workers)[0])
                warm_first.append(per_round_raynb(ds_small, 3, workers)[1])
            colds = [cold_process(small) for _ in range(args.repeats)]
            cold_first, import_s = (
                statistics.median(c[0] for c in colds),
                statistics.median(c[1] for c in colds),
            )
            import xgboost

            booster = xgboost.train(
                dict(PARAMS, nthread=workers),
                xgboost.QuantileDMatrix(df.drop(columns="y"), label=df["y"]),
                args.rounds,
            )
            model_path = os.path.join(data, "model.ubj")
            booster.save_model(model_path)
            inf = [inference(train_dir, model_path, workers) for _ in range(args.repeats)]
            med = statistics.median
            out["train_per_round_ms"] = {
                "raynb_2_ranks": round(1000 * med(dist), 2),
                "single_process_2_threads": round(1000 * med(single2), 2),
                "single_process_1_thread": round(1000 * med(single1), 2),
                "ratio_raynb_over_single_2_threads": round(med(dist) / med(single2), 2),
            }
            out["first_round_s"] = {
                "warm": round(med(warm_first), 3),
                "cold_process": round(cold_first, 3),
                "cold_cluster": round(cold_cluster_total, 3),
                "cold_cluster_fit_only": round(cold_cluster, 3),
                "ratio_cold_process_over_warm": round(cold_first / med(warm_first), 1),
            }
            out["xgboost_import_s"] = round(import_s, 3)
            out["inference_rows_per_s"] = {
                "raynb_map_batches_2_workers": round(med(i[1] for i in inf)),
                "single_process": round(med(i[0] for i in inf)),
                "rows": inf[0][2],
                "ratio_raynb_over_single": round(med(i[1] for i in inf) / med(i[0] for i in inf), 2),
            }
        if args.skip_ray:
            out["ray"] = "skipped (--skip-ray)"
        else:
            try:
                import ray  # noqa: F401

                out["ray"] = measure_ray(train_dir, args.rounds, workers)
            except ImportError:
                out["ray"] = "ray is not installed"
            except Exception as e:  # noqa: BLE001 - a failed comparison is reported, not fatal
                out["ray"] = f"failed: {type(e).__name__}: {str(e)[:300]}"
    finally:
        shutil.rmtree(data, ignore_errors=True)
    out["machine"] = machine_info(
        load0, rows=args.rows, rounds=args.rounds, repeats=args.repeats, load_avg_1m_at_end=os.getloadavg()[0]
    )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
