"""What callbacks cost a run: no callbacks, TensorBoard, MLflow, side by side. Prints one
JSON object.

On a private cluster (its own temporary ``RAYNB_HOME`` and ``RAYNB_STORAGE_PATH``;
stopped at the end whatever happens), each mode (``none``, ``tensorboard``:
``TBXLoggerCallback()``, ``mlflow``: ``MLflowLoggerCallback`` on a sqlite store in a
temporary directory) is timed in turn, round-robin, so load drift hits them alike:

- ``warm_rerun_ms``: ``TorchTrainer(fn).fit()`` of a function that makes one ``report``,
  from the call to the ``Result`` (median, p90, min), after ``--warmup`` untimed fits per
  mode (the first fit with a logger imports its library);
- ``reports_1000``: a fit whose rank 0 makes ``--reports`` (1000) ``report()`` calls in a
  tight loop: ``fit_wall_s`` (call to ``Result``, median), ``last_report_to_result_ms``
  (the last report reaching the head to the ``Result`` in hand: the run's end plus the
  wait for the callbacks to catch up), and, measured on the rank, ``rank_loop_s`` and
  ``rank_report_us`` (each ``report()`` call: mean, p50, p99, max). A rank never waits on a
  callback, so ``rank_report_us`` is the same in every mode; the target for it is 20 us.

Usage::

    python -m benchmarks.callbacks
    python -m benchmarks.callbacks --quick        # smoke test
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

from benchmarks._common import machine_info, private_cluster, quantile, raynb_cli, summary_ms  # noqa: E402

MODES = ("none", "tensorboard", "mlflow")
REPORT_TARGET_US = 20.0


def one_report():
    from raynb.train import report

    report({"x": 1.0})


def many_reports(config):
    """``config["n"]`` reports in a tight loop; rank 0 returns each call's time (ns)."""
    import time as _time

    from raynb.train import get_context, report

    took = []
    t0 = _time.perf_counter()
    for i in range(config["n"]):
        t = _time.perf_counter_ns()
        report({"loss": 1.0 / (i + 1), "step": i, "nested": {"acc": i / config["n"]}})
        took.append(_time.perf_counter_ns() - t)
    loop_s = _time.perf_counter() - t0
    return {"loop_s": loop_s, "ns": took} if get_context().get_world_rank() == 0 else None


def _callbacks(mode: str, store: str):
    from raynb.integrations import MLflowLoggerCallback, TBXLoggerCallback

    if mode == "tensorboard":
        return [TBXLoggerCallback()]
    if mode == "mlflow":
        return [MLflowLoggerCallback(f"sqlite:///{store}/mlflow.db", experiment_name="bench")]
    return None


def _us(ns: list[int]) -> dict:
    us = [x / 1000 for x in ns]
    return {
        "mean": round(statistics.fmean(us), 2),
        "p50": round(statistics.median(us), 2),
        "p99": round(quantile(us, 0.99), 2),
        "max": round(max(us), 2),
    }


def measure(workers: int, runs: int, warmup: int, big_runs: int, reports: int, store: str) -> dict:
    import raynb
    from raynb import RunConfig, ScalingConfig
    from raynb.train.fit_run import execute_run

    subprocess.run(
        raynb_cli() + ["start", "--workers", str(workers)],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )
    raynb.connect()
    sc = ScalingConfig(num_workers=workers)

    def fit(fn, mode, config=None):
        t = time.perf_counter()
        result, ret = execute_run(fn, config, sc, RunConfig(verbose=0, callbacks=_callbacks(mode, store)))
        wall = time.perf_counter() - t
        if result.state != "FINISHED":
            raise RuntimeError(f"a {mode} run went wrong: {result!r}")
        return result, ret, wall

    for mode in MODES:
        for _ in range(warmup):
            fit(one_report, mode)
    warm = {m: [] for m in MODES}
    for _ in range(runs):
        for mode in MODES:
            warm[mode].append(fit(one_report, mode)[2])

    big = {m: {"wall": [], "tail": [], "loop": [], "ns": []} for m in MODES}
    for _ in range(big_runs):
        for mode in MODES:
            t_wall = time.time()
            result, ret, wall = fit(many_reports, mode, {"n": reports})
            b = big[mode]
            b["wall"].append(wall)
            b["tail"].append(t_wall + wall - result.metrics["timestamp"])
            b["loop"].append(ret["loop_s"])
            b["ns"] += ret["ns"]
    raynb.disconnect()
    out = {"warm_rerun_ms": {m: summary_ms(warm[m]) for m in MODES}, "reports_1000": {}}
    for mode in MODES:
        b = big[mode]
        out["reports_1000"][mode] = {
            "fit_wall_s": round(statistics.median(b["wall"]), 3),
            "last_report_to_result_ms": round(statistics.median(b["tail"]) * 1000, 1),
            "rank_loop_s": round(statistics.median(b["loop"]), 4),
            "rank_report_us": _us(b["ns"]),
            "n": len(b["wall"]),
        }
    none_ms = out["warm_rerun_ms"]["none"]["median"]
    out["warm_rerun_extra_ms"] = {m: round(out["warm_rerun_ms"][m]["median"] - none_ms, 2) for m in MODES[1:]}
    mean = max(out["reports_1000"][m]["rank_report_us"]["mean"] for m in MODES)
    out["report_path"] = {
        "target_us": REPORT_TARGET_US,
        "worst_mean_us": mean,
        "over_target_us": round(max(0.0, mean - REPORT_TARGET_US), 2),
    }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2, help="ranks per run (default 2)")
    ap.add_argument("--runs", type=int, default=20, help="warm re-runs timed per mode (default 20)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs per mode first (default 2)")
    ap.add_argument("--big-runs", type=int, default=3, help="1000-report runs per mode (default 3)")
    ap.add_argument("--reports", type=int, default=1000, help="reports in the big run (default 1000)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 3 runs, 1 warm-up, 1 big run of 200")
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.warmup, args.big_runs, args.reports = 3, 1, 1, min(args.reports, 200)
    if min(args.workers, args.runs, args.big_runs, args.reports) < 1:
        ap.error("--workers, --runs, --big-runs and --reports must be >= 1")

    load_at_start = round(os.getloadavg()[0], 2)
    store = tempfile.mkdtemp(prefix="raynb-bench-mlflow-")
    try:
        with private_cluster():
            report = measure(args.workers, args.runs, args.warmup, args.big_runs, args.reports, store)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    report["machine"] = machine_info(load_at_start, load_avg_1m_at_end=round(os.getloadavg()[0], 2))
    report["settings"] = {
        "workers": args.workers,
        "runs": args.runs,
        "warmup": args.warmup,
        "big_runs": args.big_runs,
        "reports": args.reports,
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
