"""How a warm re-run's latency grows with the ranks on one host. Prints one JSON object.

A private cluster (its own temporary ``RAYNB_HOME`` and ``RAYNB_STORAGE_PATH``) with as many
warm workers as the largest size; at each size, two runs first (the process group of that
size forms: a world size other than the last run's forms a new one), then ``--runs`` timed
``TorchTrainer.fit()`` calls of the trivial function (one all-reduce, one report), submit ->
Result: median / p90 / min in ms, and ``ratio_to_smallest`` (each median over the smallest
size's). Then, full mode only, in the same run (one after the other, nothing of raynb's
running by then):

- ``torchrun``: the same all-reduce as a script launched with ``torchrun --standalone
  --nproc_per_node N`` at each size, ``--torchrun-runs`` times, end to end (median s);
- ``ray_train``: Ray Train 2.60's ``TorchTrainer(...).fit()`` of the same function at each of
  ``--ray-train`` (default 4 and 16 ranks) in a child process (``ray.init(num_cpus=32)``,
  its own temporary folder, removed after): the first fit and the median of
  ``--ray-train-fits`` more (s); ``ray_over_raynb``: that median over raynb's warm re-run
  at the same size. Skipped with the reason if Ray does not start (it gives its raylet 30 s).

- ``over_hosts`` (only with ``--hosts 1,2,4``): the same warm re-run with the ranks spread
  (SPREAD) over that many hosts, network namespaces with a node agent each and the head on
  its own (``scale_ranks_hosts.py``; needs root).

Usage::

    python -m benchmarks.scale_ranks                  # 1, 2, 4, 8, 16 ranks
    python -m benchmarks.scale_ranks --quick          # 1 and 2 ranks, 3 runs (the tests)
    python -m benchmarks.scale_ranks --sizes 4,16 --torchrun-runs 2 --ray-train 4,16
    python -m benchmarks.scale_ranks --sizes 4,8 --hosts 1,2 --torchrun-runs 0 --ray-train ""
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

from benchmarks.scale_nodes import summary, timed  # noqa: E402


def trivial_train_fn():
    """One all-reduce and one report on every rank (defined here: sent by value)."""
    import torch
    import torch.distributed as dist

    from raynb.train import report

    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    report({"sum": t.item()})


def run(sizes: list[int], runs: int) -> dict:
    from raynb import RunConfig, ScalingConfig, TorchTrainer
    from raynb.cluster.launch.local import start_cluster, stop_cluster

    t0 = time.perf_counter()
    start_cluster(num_workers=max(sizes), max_workers=max(16, max(sizes)))
    out: dict = {"start_s": round(time.perf_counter() - t0, 3), "sizes": []}
    try:
        for n in sizes:

            def fit(n=n):
                r = TorchTrainer(
                    trivial_train_fn,
                    scaling_config=ScalingConfig(num_workers=n),
                    run_config=RunConfig(verbose=0),
                ).fit()
                if r.metrics.get("sum") != sum(range(1, n + 1)):
                    raise RuntimeError(f"a run went wrong at {n} ranks: {r!r}")

            first = timed(fit, 1)[0]
            fit()
            m = {
                "ranks": n,
                "new_group_ms": round(first * 1000, 3),
                "warm_rerun_ms": summary(timed(fit, runs)),
            }
            out["sizes"].append(m)
            print(json.dumps(m), file=sys.stderr, flush=True)
    finally:
        stop_cluster()
    base = out["sizes"][0]["warm_rerun_ms"]["median"]
    out["ratio_to_smallest"] = {
        str(m["ranks"]): round(m["warm_rerun_ms"]["median"] / base, 2) for m in out["sizes"]
    }
    return out


def torchrun(sizes: list[int], runs: int) -> list[dict]:
    """``torchrun --standalone`` of the all-reduce script at each size, end to end."""
    from benchmarks._common import run_child, torchrun_cli
    from benchmarks.rerun_latency import TORCHRUN_SCRIPT

    out = []
    with tempfile.TemporaryDirectory(prefix="raynb-scale-torchrun-") as d:
        script = os.path.join(d, "allreduce.py")
        with open(script, "w") as f:
            f.write(TORCHRUN_SCRIPT)
        for n in sizes:
            cmd = torchrun_cli() + ["--standalone", "--nproc_per_node", str(n), script]
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                p = run_child(cmd, 600)
                if p is None or p.returncode != 0:
                    raise RuntimeError(f"torchrun failed at {n} ranks: {p and p.stderr[-1500:]}")
                times.append(time.perf_counter() - t0)
            out.append({"ranks": n, "median_s": round(statistics.median(times), 3), "n": runs})
            print(json.dumps({"torchrun": out[-1]}), file=sys.stderr, flush=True)
    return out


def ray_train_fn():
    """The trivial function in Ray Train's API."""
    import ray.train
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    ray.train.report({"sum": t.item()})


def ray_train_child(sizes: list[int], fits: int, tmp: str) -> None:
    """(in the child process) Ray Train's fits at each size; prints their JSON."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    t0 = time.perf_counter()
    ray.init(num_cpus=32, include_dashboard=False, log_to_driver=False, _temp_dir=os.path.join(tmp, "ray"))
    out: dict = {"init_s": round(time.perf_counter() - t0, 2), "sizes": []}
    for n in sizes:
        times = []
        for i in range(fits + 1):
            t = time.perf_counter()
            r = TorchTrainer(
                ray_train_fn,
                scaling_config=ScalingConfig(num_workers=n),
                run_config=RunConfig(storage_path=os.path.join(tmp, "results"), name=f"r{n}-{i}"),
            ).fit()
            times.append(time.perf_counter() - t)
            if r.error is not None:
                raise RuntimeError(f"Ray Train failed at {n} ranks: {r.error}")
        m = {"ranks": n, "first_fit_s": round(times[0], 2)}
        if fits:
            m["median_s"] = round(statistics.median(times[1:]), 2)
        out["sizes"].append(m)
        print(json.dumps({"ray_train": m}), file=sys.stderr, flush=True)
    ray.shutdown()
    print(json.dumps(out), flush=True)


def ray_train(sizes: list[int], fits: int) -> dict:
    """Ray Train's fits in a child process (its own Ray), its folder removed after."""
    from benchmarks._common import ray_child

    argv = [sys.executable, os.path.abspath(__file__), "--ray-child", ",".join(map(str, sizes)), str(fits)]
    return ray_child(argv, 1800, "Ray Train")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=None, help="rank counts, comma-separated (default 1,2,4,8,16)")
    ap.add_argument("--runs", type=int, default=None, help="warm re-runs timed at each size (default 21)")
    ap.add_argument("--torchrun-runs", type=int, default=None, help="torchrun launches per size (default 2)")
    ap.add_argument(
        "--ray-train", default=None, help="Ray Train at these rank counts (default 4,16; '' for none)"
    )
    ap.add_argument(
        "--ray-train-fits", type=int, default=1, help="Ray Train fits after the first (default 1)"
    )
    ap.add_argument(
        "--hosts", default=None, help="also spread the ranks over this many hosts, e.g. 1,2,4 (needs root)"
    )
    ap.add_argument("--ray-child", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument(
        "--quick", action="store_true", help="1 and 2 ranks, 3 runs, no torchrun or Ray (seconds)"
    )
    args = ap.parse_args(argv)
    if args.ray_child:
        ray_train_child(
            [int(x) for x in args.ray_child[0].split(",")], int(args.ray_child[1]), args.ray_child[2]
        )
        return 0
    sizes = [int(s) for s in (args.sizes or ("1,2" if args.quick else "1,2,4,8,16")).split(",")]
    runs = args.runs or (3 if args.quick else 21)
    tr_runs = 0 if args.quick else (2 if args.torchrun_runs is None else args.torchrun_runs)
    ray_sizes = (
        []
        if args.quick
        else [int(x) for x in (args.ray_train if args.ray_train is not None else "4,16").split(",") if x]
    )
    hosts = [int(x) for x in (args.hosts or "").split(",") if x]
    if any(h < 1 for h in hosts):
        ap.error("--hosts takes host counts >= 1, e.g. --hosts 1,2,4")
    tmp = tempfile.mkdtemp(prefix="raynb-scale-ranks-")
    os.makedirs(os.path.join(tmp, "home"), mode=0o700)
    os.environ.update(RAYNB_HOME=os.path.join(tmp, "home"), RAYNB_STORAGE_PATH=os.path.join(tmp, "results"))
    os.environ.pop("RAYNB_KEY", None)
    load0 = open("/proc/loadavg").read().split()[:3]
    try:
        out = run(sizes, runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if hosts:
        from benchmarks.scale_ranks_hosts import over_hosts

        out["over_hosts"] = over_hosts(sizes, hosts, runs)
    if tr_runs:
        out["torchrun"] = torchrun(sizes, tr_runs)
    if ray_sizes:
        out["ray_train"] = ray_train(ray_sizes, args.ray_train_fits)
        ours = {m["ranks"]: m["warm_rerun_ms"]["median"] for m in out["sizes"]}
        out["ray_over_raynb"] = {
            str(m["ranks"]): round(m["median_s"] * 1000 / ours[m["ranks"]])
            for m in out["ray_train"].get("sizes", [])
            if "median_s" in m and m["ranks"] in ours
        }
    out["settings"] = {
        "sizes": sizes,
        "runs": runs,
        "quick": args.quick,
        "torchrun_runs": tr_runs,
        "ray_train": ray_sizes,
        "ray_train_fits": args.ray_train_fits,
        "hosts": hosts,
    }
    out["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_at_start": load0,
        "loadavg_at_end": open("/proc/loadavg").read().split()[:3],
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
