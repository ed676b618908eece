"""Tune's per-trial overhead on the warm pool, and how fast a stopped trial's worker is
reused. Prints one JSON object.

On a private cluster of 2 workers (its own temporary ``RAYNB_HOME`` and
``RAYNB_STORAGE_PATH``; stopped at the end whatever happens):

- ``overhead``: ``Tuner(trivial, ...).fit()`` of ``--trials`` trials (default 200), each
  one ``report`` (plus ``--work-ms`` of sleep), 2 at a time. ``total_s`` is the wall time of
  ``fit()``; ``work_s`` the trials' own function time divided by the concurrency (the ideal
  wall time of the work); ``per_trial_overhead_ms`` = (total - work) / trials.
- ``stop``: ``--stop-trials`` trials (default 40) that report every 10 ms, stopped by a
  scheduler at their 3rd report. ``stop_to_next_start_ms``: from the driver's STOP
  decision to the function of the next trial starting on the freed worker (median, p90).

Usage::

    python -m benchmarks.tune_overhead
    python -m benchmarks.tune_overhead --quick        # smoke test (~5 s)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks._common import machine_info, private_cluster, quantile, raynb_cli  # noqa: E402

WORKERS = 2


def trivial(config):
    """One report; the work timed is the function's own run time."""
    import time as _time

    from raynb.tune import report

    t0 = _time.time()
    if config["work_ms"]:
        _time.sleep(config["work_ms"] / 1000)
    report({"i": config["i"], "fn_start": t0, "fn_time": _time.time() - t0})


def reporting(config):
    """Reports every 10 ms until the scheduler stops it."""
    import time as _time

    from raynb.tune import report

    t0 = _time.time()
    for i in range(1000):
        report({"i": i, "fn_start": t0})
        _time.sleep(0.01)


def _stop_at_three():
    from raynb.tune.schedulers import TrialScheduler

    class StopAtThree(TrialScheduler):
        def on_trial_result(self, trial, result):
            return self.STOP if result["training_iteration"] >= 3 else self.CONTINUE

    return StopAtThree()


def measure(trials: int, stop_trials: int, work_ms: float) -> dict:
    import raynb
    from raynb import tune

    subprocess.run(
        raynb_cli() + ["start", "--workers", str(WORKERS)],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )
    raynb.connect()
    quiet = raynb.RunConfig(verbose=0)

    def fit(n, fn=trivial, **tc):
        space = {"i": tune.grid_search(list(range(n))), "work_ms": work_ms}
        return tune.Tuner(fn, param_space=space, tune_config=tune.TuneConfig(**tc), run_config=quiet).fit()

    fit(2 * WORKERS)  # warm-up: process groups, imports, the first experiment directory
    t = time.perf_counter()
    grid = fit(trials)
    total = time.perf_counter() - t
    if grid.num_terminated != trials:
        raise RuntimeError(f"not every trial finished: {grid!r}")
    work = sum(r.metrics["fn_time"] for r in grid) / WORKERS
    out = {
        "overhead": {
            "trials": trials,
            "concurrency": WORKERS,
            "work_ms_per_trial": work_ms,
            "total_s": round(total, 3),
            "work_s": round(work, 3),
            "per_trial_overhead_ms": round((total - work) / trials * 1000, 3),
            "trials_per_s": round(trials / total, 1),
        }
    }

    grid = fit(stop_trials, fn=reporting, scheduler=_stop_at_three())
    gaps = []
    for r in grid:
        extra = r._trial.extra
        if r.status != "TERMINATED" or not extra.get("early_stopped"):  # Ray's status for a stopped trial
            raise RuntimeError(f"trial {r.trial_id} was not stopped: {r.status}")
        if "freed_by_stop_at" in extra:  # this trial took the worker of a stopped one
            gaps.append(r.metrics_dataframe["fn_start"].iloc[0] - extra["freed_by_stop_at"])
    out["stop"] = {
        "trials": stop_trials,
        "stop_to_next_start_ms": {
            "median": round(statistics.median(gaps) * 1000, 2),
            "p90": round(quantile(gaps, 0.9) * 1000, 2),
            "max": round(max(gaps) * 1000, 2),
            "n": len(gaps),
        },
    }
    raynb.disconnect()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=200, help="trivial trials timed (default 200)")
    ap.add_argument(
        "--stop-trials", type=int, default=40, help="trials stopped by the scheduler (default 40)"
    )
    ap.add_argument("--work-ms", type=float, default=0.0, help="sleep in each trivial trial (ms, default 0)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 20 trials, 6 stopped ones")
    args = ap.parse_args(argv)
    if args.quick:
        args.trials, args.stop_trials = min(args.trials, 20), min(args.stop_trials, 6)
    if args.trials < 1 or args.stop_trials < WORKERS + 1:
        ap.error(f"--trials must be >= 1 and --stop-trials >= {WORKERS + 1}")

    load_at_start = round(os.getloadavg()[0], 2)
    with private_cluster():
        report = measure(args.trials, args.stop_trials, args.work_ms)
    report["machine"] = machine_info(load_at_start)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
