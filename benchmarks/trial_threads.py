"""Concurrent one-rank Tune trials and their threads: four trials at once on the warm pool,
each a fixed amount of torch work, with the threads raynb gives each rank (its share of the
node's cores) against the same trials each pinned to one thread. Prints one JSON object.

On a private cluster of 4 workers (its own temporary ``RAYNB_HOME`` and storage), ``--rounds``
times in turn (default 3), each variant's ``Tuner.fit()`` of 4 trials with
``max_concurrent_trials=4`` is timed:

- ``default_s``: the function takes the threads raynb set (``torch.get_num_threads()``);
- ``one_thread_s``: the function calls ``torch.set_num_threads(1)`` first;
- ``ratio``: median default / median one-thread (the issue's target: within 1.1x), and
  ``threads_seen``: what ``torch.get_num_threads()`` said halfway through the default
  trials' work (at their end, the last trial left has grown to the node's cores).

Usage::

    python -m benchmarks.trial_threads
    python -m benchmarks.trial_threads --quick      # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks._common import machine_info, private_cluster, raynb_cli

WORKERS = 4


def work(config):
    """``config['steps']`` matmuls of 256x256 float32; reports the threads it ran with halfway."""
    import torch

    from raynb.tune import report

    if config["one_thread"]:
        torch.set_num_threads(1)
    a = torch.randn(256, 256)
    t0 = time.perf_counter()
    half = None
    for i in range(config["steps"]):
        a = torch.tanh(a @ a)
        if i == config["steps"] // 2:
            half = torch.get_num_threads()
    report({"threads": half, "fn_s": time.perf_counter() - t0})


def fit_once(one_thread: bool, steps: int) -> tuple[float, list[int]]:
    from raynb import tune
    from raynb.train import RunConfig

    tuner = tune.Tuner(
        work,
        param_space={"one_thread": one_thread, "steps": steps, "i": tune.grid_search(list(range(4)))},
        tune_config=tune.TuneConfig(max_concurrent_trials=4),
        run_config=RunConfig(verbose=0),
    )
    t0 = time.perf_counter()
    grid = tuner.fit()
    elapsed = time.perf_counter() - t0
    return elapsed, [int(r.metrics["threads"]) for r in grid]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=400, help="matmuls per trial (default 400)")
    ap.add_argument("--quick", action="store_true", help="1 round of 20 steps")
    args = ap.parse_args(argv)
    rounds, steps = (1, 20) if args.quick else (args.rounds, args.steps)
    load = os.getloadavg()[0]
    with private_cluster():
        import raynb

        cmd = raynb_cli() + ["start", "--workers", str(WORKERS)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=300)
        raynb.connect()
        fit_once(False, 5)  # warm: torch imported, the pool formed
        default, single, seen = [], [], set()
        for _ in range(rounds):
            t, threads = fit_once(False, steps)
            default.append(t)
            seen.update(threads)
            single.append(fit_once(True, steps)[0])
        raynb.disconnect()
    d, s = statistics.median(default), statistics.median(single)
    out = {
        "default_s": {"median": round(d, 3), "all": [round(x, 3) for x in default]},
        "one_thread_s": {"median": round(s, 3), "all": [round(x, 3) for x in single]},
        "ratio": round(d / s, 3),
        "threads_seen": sorted(seen),
        "settings": {"workers": WORKERS, "trials": 4, "steps": steps, "rounds": rounds},
        "machine": machine_info(load, load_avg_1m_at_end=round(os.getloadavg()[0], 2)),
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
