"""How a warm re-run's latency grows with the ranks on one host. Prints one JSON object.

A private cluster (its own temporary ``RAYNB_HOME`` and ``RAYNB_STORAGE_PATH``) with as many
warm workers as the largest size; at each size, two runs first (the process group of that
size forms: a world size other than the last run's forms a new one), then ``--runs`` timed
``TorchTrainer.fit()`` calls of the trivial function (one all-reduce, one report), submit ->
Result: median / p90 / min in ms, and ``ratio_to_smallest`` (each median over the smallest
size's). Spreading the ranks over several hosts (network namespaces, a node agent each) and
the side-by-side torchrun / Ray Train figures are not part of this script.

Usage::

    python -m benchmarks.scale_ranks                  # 1, 2, 4, 8, 16 ranks
    python -m benchmarks.scale_ranks --quick          # 1 and 2 ranks, 3 runs (the tests)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=None, help="rank counts, comma-separated (default 1,2,4,8,16)")
    ap.add_argument("--runs", type=int, default=None, help="warm re-runs timed at each size (default 21)")
    ap.add_argument("--quick", action="store_true", help="1 and 2 ranks, 3 runs (seconds)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("1,2" if args.quick else "1,2,4,8,16")).split(",")]
    runs = args.runs or (3 if args.quick else 21)
    tmp = tempfile.mkdtemp(prefix="raynb-scale-ranks-")
    os.makedirs(os.path.join(tmp, "home"), mode=0o700)
    os.environ.update(RAYNB_HOME=os.path.join(tmp, "home"), RAYNB_STORAGE_PATH=os.path.join(tmp, "results"))
    os.environ.pop("RAYNB_KEY", None)
    load0 = open("/proc/loadavg").read().split()[:3]
    try:
        out = run(sizes, runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["settings"] = {"sizes": sizes, "runs": runs, "quick": args.quick}
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
