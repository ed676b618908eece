"""Ray Train's ``TorchTrainer.fit()`` against raynb's warm re-run, side by side on the same
Ray cluster in one run, and raynb's local cluster for reference. Prints one JSON object.

The Ray cluster is ``ray.cluster_utils.Cluster`` on this machine (a head raylet with 1
CPU, two worker raylets with 2 CPUs each), in a temp dir of its own. The function is
the trivial 4-rank one (one ``all_reduce``, one ``report``) in each API:

- ``ray_train``: ``ray.train.torch.TorchTrainer(...).fit()`` with
  ``ScalingConfig(num_workers=4)``: the first fit after Ray started, then ``--ray-train-fits``
  more (median, min). Run before raynb starts: raynb's agents hold the CPUs it needs.
- ``raynb_on_ray``: ``start_on_ray`` (agents on every Ray node), the first ``fit()``,
  then ``--raynb-runs`` warm re-runs (median, p90, min).
- ``raynb_local``: the same on ``start_cluster(4)`` (no Ray), for the ratio the issue
  targets (raynb on Ray within 2x of raynb local).

Load averages are taken before and after; everything started is stopped by pid.

Usage::

    python -m benchmarks.ray_engine                     # 1+3 Ray Train fits, 30 warm re-runs
    python -m benchmarks.ray_engine --quick --skip-ray-train   # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time


def raynb_fn():
    import torch
    import torch.distributed as dist

    from raynb.train import report

    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    report({"sum": t.item()})


def ray_train_fn():
    import ray.train
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    assert t.item() == 10.0, t  # Ray Train 2.60 (Train V2) keeps no metrics reported without a checkpoint
    ray.train.report({"sum": t.item()})


def _ms(xs):
    xs = sorted(xs)
    return {
        "median_ms": round(statistics.median(xs) * 1000, 2),
        "p90_ms": round(xs[min(len(xs) - 1, int(0.9 * len(xs)))] * 1000, 2),
        "min_ms": round(xs[0] * 1000, 2),
        "n": len(xs),
    }


def _raynb_runs(n: int) -> tuple[float, list[float]]:
    from raynb.train import RunConfig, ScalingConfig
    from raynb.train.torch import TorchTrainer

    times = []
    for _ in range(n + 1):
        t = time.perf_counter()
        r = TorchTrainer(
            raynb_fn, scaling_config=ScalingConfig(num_workers=4), run_config=RunConfig(verbose=0)
        ).fit()
        times.append(time.perf_counter() - t)
        assert r.error is None and r.metrics["sum"] == 10.0, (r.error, r.metrics)
    return times[0], times[1:]


def _ray_train(n: int, storage: str) -> dict:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    times = []
    for i in range(n + 1):
        t = time.perf_counter()
        r = TorchTrainer(
            ray_train_fn,
            scaling_config=ScalingConfig(num_workers=4),
            run_config=RunConfig(storage_path=storage, name=f"bench{i}"),
        ).fit()
        times.append(time.perf_counter() - t)
        assert r.error is None, r.error
    out = {"first_fit_s": round(times[0], 2)}
    if n:
        out.update(median_s=round(statistics.median(times[1:]), 2), min_s=round(min(times[1:]), 2), n=n)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ray-train-fits", type=int, default=3, help="fits after the first (default 3)")
    ap.add_argument("--raynb-runs", type=int, default=30, help="warm re-runs after the first (default 30)")
    ap.add_argument("--skip-ray-train", action="store_true")
    ap.add_argument("--skip-local", action="store_true")
    ap.add_argument("--quick", action="store_true", help="1 Ray Train fit, 5 warm re-runs")
    args = ap.parse_args()
    if args.quick:
        args.ray_train_fits, args.raynb_runs = 0, 5
    import psutil

    tmp = tempfile.mkdtemp(prefix="rre.")
    os.environ.update(
        RAY_TMPDIR=tmp,
        RAYNB_HOME=os.path.join(tmp, "home"),
        RAYNB_STORAGE_PATH=os.path.join(tmp, "results"),
        RAYNB_PROGRESS="text",
    )
    out = {"load_avg_before": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
    started = set()
    try:
        import ray
        from ray.cluster_utils import Cluster

        out["ray_version"] = ray.__version__
        t = time.perf_counter()
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "include_dashboard": False, "temp_dir": os.path.join(tmp, "ray")},
        )
        for _ in range(2):
            cluster.add_node(num_cpus=2)
        ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
        cluster.wait_for_nodes()
        out["ray_cluster_start_s"] = round(time.perf_counter() - t, 2)
        try:
            if not args.skip_ray_train:
                out["ray_train"] = _ray_train(args.ray_train_fits, os.path.join(tmp, "ray_results"))
            from raynb.cluster.launch.ray_engine import start_on_ray, stop_on_ray

            t = time.perf_counter()
            info, _ = start_on_ray(cluster.address, workers_per_node=2)
            start_s = time.perf_counter() - t
            first, warm = _raynb_runs(args.raynb_runs)
            out["raynb_on_ray"] = {
                "start_s": round(start_s, 2),
                "first_run_ms": round(first * 1000, 1),
                **_ms(warm),
            }
            import raynb

            raynb.disconnect()
            stop_on_ray(info)
        finally:
            started |= {p.pid for p in psutil.Process().children(recursive=True)}
            ray.shutdown()
            cluster.shutdown()
        if not args.skip_local:
            from raynb.cluster.launch.local import start_cluster, stop_cluster

            os.environ["RAYNB_HOME"] = os.path.join(tmp, "home-local")
            t = time.perf_counter()
            start_cluster(num_workers=4)
            start_s = time.perf_counter() - t
            try:
                first, warm = _raynb_runs(args.raynb_runs)
                out["raynb_local"] = {
                    "start_s": round(start_s, 2),
                    "first_run_ms": round(first * 1000, 1),
                    **_ms(warm),
                }
            finally:
                import raynb

                raynb.disconnect()
                started |= {p.pid for p in psutil.Process().children(recursive=True)}
                stop_cluster()
        on_ray = out["raynb_on_ray"]["median_ms"]
        if "raynb_local" in out:
            out["raynb_on_ray_over_local"] = round(on_ray / out["raynb_local"]["median_ms"], 2)
        if "median_s" in out.get("ray_train", {}):
            out["speedup_vs_ray_train"] = round(out["ray_train"]["median_s"] * 1000 / on_ray, 1)
    finally:
        from raynb.cluster.procutil import alive

        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and alive(started):
            time.sleep(0.2)
        for pid in alive(started):  # by pid: only what this run started
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
        shutil.rmtree(tmp, ignore_errors=True)
    out["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
