"""How Tune's costs grow with the number of trials. Prints one JSON object.

On a private cluster of 2 workers (its own temporary ``RAYNB_HOME`` and
``RAYNB_STORAGE_PATH``; stopped at the end whatever happens), for each N of ``--trials``:

- ``sweeps[i]``: ``Tuner(trivial, ...).fit()`` of N trivial trials (``--reports`` reports
  each, one by default) with ``ASHAScheduler`` (``max_t`` = the reports), 2 at a time.
  ``wall_s``; ``per_trial_overhead_ms`` = wall / N (ms); ``driver`` and ``head``: RSS after
  the sweep (MiB) and CPU seconds the sweep took (user + system); the driver's
  ``rss_growth_kib_per_trial``: its RSS growth over the sweep, the ResultGrid still held,
  over N (KiB); ``experiment_dir``: bytes and file count of the sweep's directory.
- ``table[i]``: the notebook's trial table model (`raynb.notebook.trial_table.model.TuneProgress`)
  holding N trials, measured directly: ``update_us`` is one report (``add_result``) plus
  what a live redraw reads (the header, the 30-row HTML table, errors and notes), median
  of ``--updates`` updates, in microseconds; ``summary_ms`` and ``summary_kb``: the HTML
  summary the notebook's pane leaves when the sweep ends (the live table's 30 rows, the
  rest counted; without its plot), its render time and size.
- ``overhead_ratio``, ``table_ratio``: the largest N's figure over the smallest's.
- ``ray_tune`` (only with ``--ray N``): Ray Tune 2.60's ``Tuner(...).fit()`` of the same N
  trivial trials with its ``ASHAScheduler``, in a child process
  (``ray.init(num_cpus=2, include_dashboard=False)``, its temporary and storage folders
  under a private directory removed after): ``init_s``, ``wall_s``, ``per_trial_overhead_ms``,
  the driver's RSS (MiB) and CPU seconds, the experiment directory's bytes and files; or
  ``skipped`` and why (not installed, a timeout of ``--ray-timeout`` s).

Usage::

    python -m benchmarks.scale_trials                   # 100 and 1000 trials
    python -m benchmarks.scale_trials --trials 100,1000,10000
    python -m benchmarks.scale_trials --quick           # 10 and 30 trials (the tests)
    python -m benchmarks.scale_trials --trials 1000 --ray 1000   # Ray Tune beside raynb
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

import psutil

from benchmarks._common import machine_info, private_cluster  # noqa: E402

WORKERS = 2


def trivial(config):
    """``config["reports"]`` reports (one by default)."""
    from raynb.tune import report

    for i in range(config.get("reports", 1)):
        report({"score": config["x"] + i})


def _cpu_s(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def _dir_size(path: str) -> tuple[int, int]:
    size = files = 0
    for root, _, names in os.walk(path):
        for n in names:
            try:
                size += os.path.getsize(os.path.join(root, n))
                files += 1
            except OSError:
                pass
    return size, files


def sweep(n: int, head: psutil.Process, storage: str, reports: int = 1) -> dict:
    """One ASHA sweep of ``n`` trivial trials of ``reports`` reports each; its wall time,
    memory, CPU and directory."""
    import raynb
    from raynb import tune
    from raynb.tune.schedulers import ASHAScheduler

    me = psutil.Process()
    gc.collect()
    cpu0, hcpu0, rss0 = _cpu_s(me), _cpu_s(head), me.memory_info().rss
    t0 = time.perf_counter()
    grid = tune.Tuner(
        trivial,
        param_space={"x": tune.uniform(0, 1), "reports": reports},
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            num_samples=n,
            scheduler=ASHAScheduler(max_t=reports, grace_period=reports),
        ),
        run_config=raynb.RunConfig(name=f"scale-{n}", verbose=0),
    ).fit()
    wall = time.perf_counter() - t0
    if grid.num_terminated != n:
        raise RuntimeError(f"not every trial finished: {grid!r}")
    gc.collect()
    grown = me.memory_info().rss - rss0  # the grid (every trial) still held
    size, files = _dir_size(os.path.join(storage, f"scale-{n}"))
    return {
        "trials": n,
        "reports_per_trial": reports,
        "wall_s": round(wall, 3),
        "per_trial_overhead_ms": round(wall / n * 1000, 3),
        "driver": {
            "rss_mib": round(me.memory_info().rss / 2**20, 1),
            "rss_growth_kib_per_trial": round(grown / n / 1024, 2),
            "cpu_s": round(_cpu_s(me) - cpu0, 2),
        },
        "head": {
            "rss_mib": round(head.memory_info().rss / 2**20, 1),
            "cpu_s": round(_cpu_s(head) - hcpu0, 2),
        },
        "experiment_dir": {"bytes": size, "files": files},
    }


def ray_tune_child(n: int, tmp: str) -> None:
    """(in the child process) Ray Tune's sweep of ``n`` trivial trials; prints its JSON."""
    t0 = time.perf_counter()
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    ray.init(
        num_cpus=WORKERS, include_dashboard=False, log_to_driver=False, _temp_dir=os.path.join(tmp, "ray")
    )
    t1 = time.perf_counter()
    me = psutil.Process()
    cpu0 = _cpu_s(me)

    def ray_trivial(config):
        tune.report({"score": config["x"]})

    storage = os.path.join(tmp, "results")
    grid = tune.Tuner(
        ray_trivial,
        param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(
            metric="score", mode="max", num_samples=n, scheduler=ASHAScheduler(max_t=1, grace_period=1)
        ),
        run_config=tune.RunConfig(name=f"ray-{n}", storage_path=storage, verbose=0),
    ).fit()
    wall = time.perf_counter() - t1
    done = sum(1 for r in grid if r.error is None)
    rss, cpu = me.memory_info().rss, _cpu_s(me) - cpu0
    ray.shutdown()
    size, files = _dir_size(os.path.join(storage, f"ray-{n}"))
    out = {
        "trials": n,
        "finished": done,
        "init_s": round(t1 - t0, 2),
        "wall_s": round(wall, 3),
        "per_trial_overhead_ms": round(wall / n * 1000, 3),
        "driver": {"rss_mib": round(rss / 2**20, 1), "cpu_s": round(cpu, 2)},
        "experiment_dir": {"bytes": size, "files": files},
    }
    print(json.dumps(out), flush=True)


def ray_tune(n: int, timeout_s: float) -> dict:
    """Ray Tune's sweep of ``n`` trials in a child process (its own Ray), cleaned up after."""
    from benchmarks._common import ray_child

    try:
        import ray  # noqa: F401 - is it there at all
    except ImportError:
        return {"skipped": "Ray is not installed"}
    return ray_child(
        [sys.executable, os.path.abspath(__file__), "--ray-child", str(n)], timeout_s, "Ray Tune"
    )


def table_update_us(n: int, updates: int) -> dict:
    """One report into a `TuneProgress` of ``n`` trials and what a live redraw reads."""
    from raynb.notebook.trial_table.model import TuneProgress

    p = TuneProgress("score", "max", WORKERS)
    for i in range(n):
        p.add_trial(f"t_{i:05d}", {"lr": i * 1e-4, "width": i % 7})
        p.set_status(f"t_{i:05d}", "TERMINATED")
        p.add_result(f"t_{i:05d}", {"score": (i * 7919 % 1000) / 1000, "training_iteration": 1})
    times = []
    for k in range(updates):
        tid = f"t_{(k * 31) % n:05d}"
        t0 = time.perf_counter()
        p.add_result(tid, {"score": (k % 997) / 997, "training_iteration": 2})
        p.header_html(), p.html_table(30), p.errors_html(), p.notes_html(last=5)
        times.append(time.perf_counter() - t0)
    summary = _summary(p)
    return {
        "trials": n,
        "update_us": round(statistics.median(times) * 1e6, 1),
        "updates": updates,
        "summary_ms": round(summary[0] * 1000, 2),
        "summary_kb": round(summary[1] / 1024, 1),
    }


def _summary(p) -> tuple[float, int]:
    """The end-of-sweep HTML summary a notebook pane leaves (its 30 rows; without the plot):
    seconds to render (median of 3), and its size in bytes."""
    import inspect

    kw = {"max_rows": 30} if "max_rows" in inspect.signature(p.summary_html).parameters else {}
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        html = p.summary_html(plot=False, **kw)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(html)


def measure(sizes: list[int], updates: int, home: str, storage: str, reports: int = 1) -> dict:
    import subprocess

    import raynb
    from benchmarks._common import raynb_cli
    from raynb.cluster.connection_file import read_connection_file

    subprocess.run(
        raynb_cli() + ["start", "--workers", str(WORKERS)],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )
    raynb.connect()
    head = psutil.Process(read_connection_file()["pids"]["head"])
    sweep(4, head, storage)  # warm-up: imports, process groups, the first directory
    out: dict = {"sweeps": [], "table": []}
    for n in sizes:
        out["sweeps"].append(sweep(n, head, storage, reports))
        print(json.dumps(out["sweeps"][-1]), file=sys.stderr, flush=True)
    raynb.disconnect()
    out["table"] = [table_update_us(n, updates) for n in sizes]
    first, last = out["sweeps"][0], out["sweeps"][-1]
    out["overhead_ratio"] = round(last["per_trial_overhead_ms"] / first["per_trial_overhead_ms"], 2)
    out["table_ratio"] = round(out["table"][-1]["update_us"] / out["table"][0]["update_us"], 2)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", default=None, help="trial counts, comma-separated (default 100,1000)")
    ap.add_argument("--updates", type=int, default=None, help="table updates timed per size (default 200)")
    ap.add_argument("--reports", type=int, default=1, help="reports per trial (default 1)")
    ap.add_argument("--quick", action="store_true", help="10 and 30 trials, 20 table updates (seconds)")
    ap.add_argument("--ray", type=int, default=0, help="also Ray Tune 2.60 with this many trials (0: not)")
    ap.add_argument("--ray-timeout", type=float, default=1800.0, help="seconds Ray Tune's sweep may take")
    ap.add_argument("--ray-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.ray_child:
        ray_tune_child(int(args.ray_child[0]), args.ray_child[1])
        return 0
    sizes = [int(s) for s in (args.trials or ("10,30" if args.quick else "100,1000")).split(",")]
    updates = args.updates or (20 if args.quick else 200)
    if min(sizes) < 1 or updates < 1 or args.reports < 1:
        ap.error("--trials, --updates and --reports must be >= 1")
    load0 = round(os.getloadavg()[0], 2)
    with private_cluster() as (home, storage):
        out = measure(sizes, updates, home, storage, args.reports)
    if args.ray:
        out["ray_tune"] = ray_tune(args.ray, args.ray_timeout)
    out["settings"] = {
        "trials": sizes,
        "updates": updates,
        "reports": args.reports,
        "quick": args.quick,
        "workers": WORKERS,
        "ray_trials": args.ray,
    }
    out["machine"] = machine_info(load0, loadavg_at_end=open("/proc/loadavg").read().split()[:3])
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
