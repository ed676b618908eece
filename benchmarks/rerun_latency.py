"""Cold start and warm re-run latency of raynb, next to torchrun. Prints one JSON object.

What is timed, on a private cluster (its own temporary ``RAYNB_HOME`` and
``RAYNB_STORAGE_PATH``, so a user's cluster is never touched):

- ``cold_start_s``: wall time of ``raynb start --workers 4`` (the real CLI, in a
  subprocess) plus the first ``TorchTrainer(...).fit()`` (which forms the process group);
- ``warm_rerun_ms``: ``--runs`` further ``fit()`` calls of the same trivial function
  (one ``all_reduce``, one ``report``) on 4 ranks, submit -> every rank done -> Result,
  median / p90 / min; ``warm_split_ms`` breaks the medians down (see below);
- ``torchrun_s``: the same function as a script, launched ``--torchrun-runs`` times with
  ``torchrun --standalone --nproc_per_node 4``, end to end;
- ``speedup_vs_torchrun``: torchrun median / warm re-run median;
- ``floor_ms``: the same function on the bare floor prototype (``floor.py``: forked
  workers, one gloo group, a cloudpickled function over ZeroMQ, no signing), one floor
  run after each timed raynb run so both see the same load; ``ratio_to_floor`` is the
  raynb median over the floor median.
- ``floor_relay_ms``: the same on ``floor.RelayFloor``, the floor with one process between
  the driver and the workers that forwards every message unread (raynb's path, client ->
  head -> ranks -> head -> client, with nothing done in the head), one run after each floor
  run; ``ratio_to_floor_relay`` is raynb's median over it: what raynb's own work costs,
  beyond the head's two extra hops.
- ``--idle-ms MS``: the machine left idle for MS milliseconds before each timed run (raynb's
  and each floor's), as between two cells of a notebook: on a VM whose idle vCPUs halt, a
  run after a pause pays for the wake-ups and the caches other guests took meanwhile,
  which back-to-back runs never see.
- ``--busy-loops K``: K processes spinning on the CPU (nice 0) while the warm runs, the
  floors' included, are timed, as another kernel's work would: the issue's "at load <= 3"
  made reproducible (each adds about 1 to the load average). They are started after the
  warm-up and killed, by pid, before the cluster stops.
- ``spare_run_dirs``: the run directories that were spares made ahead by the head
  (``cluster/storage/made_ahead/spare_files.py``: in block groups where new files are cheap) and those
  made on the spot; ``machine.inode_create_us`` is what one new file costs in the
  benchmark's directory, at its start and end.

The cluster is always stopped (``raynb stop``) at the end, and any process it left is
killed, whatever happened.

Usage::

    python -m benchmarks.rerun_latency                 # 50 warm runs, 3 torchruns
    python -m benchmarks.rerun_latency --quick --skip-torchrun   # smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

from benchmarks._common import (  # noqa: F401 - re-exported for scripts that import them from here
    inode_create_us,
    machine_info,
    private_cluster,
    quantile,
    raynb_cli,
    stop_cluster,
    summary_ms,
    torchrun_cli,
)

WORKERS = 4

TORCHRUN_SCRIPT = textwrap.dedent("""\
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    assert t.item() == sum(range(1, dist.get_world_size() + 1)), t
    dist.destroy_process_group()
""")


def floor_train_fn(report):
    """``trivial_train_fn`` on the floor prototype (``report`` is its one ZeroMQ send)."""
    import time as _time

    import torch
    import torch.distributed as dist

    t0 = _time.time()
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    if dist.get_rank() == 0:
        report({"sum": t.item(), "fn_start": t0, "timestamp": _time.time()})


def trivial_train_fn():
    """One all-reduce and one report on every rank (what is timed)."""
    import time as _time

    import torch
    import torch.distributed as dist

    from raynb.train import report

    t0 = _time.time()
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    report({"sum": t.item(), "fn_start": t0})


# -- helpers --------------------------------------------------------------------------
def measure_raynb(runs: int, warmup: int, floor: bool = True, busy: int = 0, idle_s: float = 0.0) -> dict:
    import raynb
    from raynb import RunConfig, ScalingConfig, TorchTrainer

    def fit():
        return TorchTrainer(
            trivial_train_fn,
            scaling_config=ScalingConfig(num_workers=WORKERS),
            run_config=RunConfig(verbose=0),
        ).fit()

    out: dict = {}
    t0 = time.perf_counter()
    subprocess.run(
        raynb_cli() + ["start", "--workers", str(WORKERS)],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )
    t_started = time.perf_counter()
    result = fit()
    t_first = time.perf_counter()
    if result.state != "FINISHED" or result.metrics["sum"] != sum(range(1, WORKERS + 1)):
        raise RuntimeError(f"the first run went wrong: {result!r}")
    out["cold_start_s"] = round(t_first - t0, 3)
    out["cold_start_detail_s"] = {
        "raynb_start": round(t_started - t0, 3),
        "first_run": round(t_first - t_started, 3),
    }

    for _ in range(warmup):
        fit()
    floor_runs: list = []
    relay_runs: list = []
    floor_ctx = _floors() if floor else contextlib.nullcontext()
    with floor_ctx as floors:
        for fl in floors or ():
            for _ in range(warmup):
                fl.run(floor_train_fn)
        with busy_loops(busy):
            out.update(_timed_runs(fit, runs, floors, floor_runs, relay_runs, idle_s))
    if floor_runs:
        secs = [r["seconds"] for r in floor_runs]
        out["floor_ms"] = summary_ms(secs)
        med = lambda xs: round(statistics.median(xs) * 1000, 3)  # noqa: E731
        out["floor_split_ms"] = {
            "submit_to_rank0_fn_start": med([r["reports"][0]["fn_start"] - r["wall0"] for r in floor_runs]),
            "rank0_fn_start_to_report": med(
                [r["reports"][0]["timestamp"] - r["reports"][0]["fn_start"] for r in floor_runs]
            ),
            "report_to_result": med([r["wall1"] - r["reports"][0]["timestamp"] for r in floor_runs]),
        }
        out["ratio_to_floor"] = round(out["warm_rerun_ms"]["median"] / out["floor_ms"]["median"], 2)
        out["floor_relay_ms"] = summary_ms([r["seconds"] for r in relay_runs])
        out["ratio_to_floor_relay"] = round(
            out["warm_rerun_ms"]["median"] / out["floor_relay_ms"]["median"], 2
        )
    # Run directories that were spares made ahead (cluster/storage/made_ahead/spare_files.py), and those made
    # on the spot: the figure depends on it where making files is dear (see the README).
    out["spare_run_dirs"] = raynb.cluster_status().get("spare_files")
    raynb.disconnect()
    return out


@contextlib.contextmanager
def _floors():
    """(the floor, the relay floor), both up."""
    from benchmarks.floor import Floor, RelayFloor

    with Floor(WORKERS) as fl, RelayFloor(WORKERS) as relay:
        yield fl, relay


@contextlib.contextmanager
def busy_loops(count: int):
    """``count`` processes spinning on the CPU for the block's duration (killed by pid)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.5 if procs else 0)  # running before the first timed run
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _timed_runs(fit, runs: int, floors, floor_runs: list, relay_runs: list, idle_s: float = 0.0) -> dict:
    """``runs`` timed raynb fits (each followed by one floor and one relay-floor run,
    when ``floors``), each after ``idle_s`` seconds of sleep."""
    out: dict = {}
    total, dispatch, in_fn, back, head = [], [], [], [], []
    for _ in range(runs):
        if idle_s:
            time.sleep(idle_s)
        wall0 = time.time()
        t = time.perf_counter()
        result = fit()
        dt = time.perf_counter() - t
        wall1 = time.time()
        m = result.metrics
        if result.state != "FINISHED" or m["sum"] != sum(range(1, WORKERS + 1)):
            raise RuntimeError(f"a warm run went wrong: {result!r}")
        total.append(dt)
        # Wall clocks of processes on this one machine: comparable.
        dispatch.append(m["fn_start"] - wall0)  # submit -> rank 0's function starts
        in_fn.append(m["timestamp"] - m["fn_start"])  # all_reduce, up to rank 0's report
        back.append(wall1 - m["timestamp"])  # report -> every rank done -> Result in hand
        head.append(result.time_total_s)  # the head's view: tasks sent -> last rank done
        for fl, into in zip(floors or (), (floor_runs, relay_runs)):
            if idle_s:
                time.sleep(idle_s)
            wall0 = time.time()
            r = fl.run(floor_train_fn)
            r["wall0"], r["wall1"] = wall0, time.time()
            if r["reports"][0]["sum"] != sum(range(1, WORKERS + 1)):
                raise RuntimeError(f"a floor run went wrong: {r!r}")
            into.append(r)
    out["warm_rerun_ms"] = summary_ms(total)
    med = lambda xs: round(statistics.median(xs) * 1000, 3)  # noqa: E731
    out["warm_split_ms"] = {
        "submit_to_rank0_fn_start": med(dispatch),
        "rank0_fn_start_to_report": med(in_fn),
        "report_to_result": med(back),
        "head_run_time": med(head),
        "outside_head_run_time": med([a - b for a, b in zip(total, head)]),
    }
    return out


def measure_torchrun(runs: int) -> dict:
    times = []
    with tempfile.TemporaryDirectory(prefix="raynb-bench-torchrun-") as d:
        script = os.path.join(d, "allreduce.py")
        with open(script, "w") as f:
            f.write(TORCHRUN_SCRIPT)
        cmd = torchrun_cli() + ["--standalone", "--nproc_per_node", str(WORKERS), script]
        for _ in range(runs):
            t = time.perf_counter()
            proc = subprocess.Popen(
                cmd, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
            )
            try:
                _, err = proc.communicate(timeout=300)
            except BaseException:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise
            dt = time.perf_counter() - t
            if proc.returncode != 0:
                raise RuntimeError(
                    f"torchrun failed ({proc.returncode}):\n{err.decode(errors='replace')[-2000:]}"
                )
            times.append(dt)
    return {
        "median": round(statistics.median(times), 3),
        "n": len(times),
        "all": [round(x, 3) for x in times],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=50, help="warm re-runs timed (default 50)")
    ap.add_argument("--warmup", type=int, default=2, help="warm runs after the first, not timed (default 2)")
    ap.add_argument("--torchrun-runs", type=int, default=3, help="torchrun launches timed (default 3)")
    ap.add_argument("--skip-torchrun", action="store_true", help="do not time torchrun")
    ap.add_argument("--skip-floor", action="store_true", help="do not time the floor prototypes")
    ap.add_argument(
        "--busy-loops",
        type=int,
        default=0,
        metavar="K",
        help="K processes spinning on the CPU while the warm runs are timed (default 0)",
    )
    ap.add_argument(
        "--idle-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="sleep MS milliseconds before each timed run, as between notebook cells (default 0)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke test: 5 warm runs, 1 warm-up, 1 torchrun")
    ap.add_argument(
        "--storage-dir",
        default=None,
        help="where the private RAYNB_HOME and storage path "
        "are made (default: $TMPDIR); machine.inode_create_us is measured there",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.warmup, args.torchrun_runs = min(args.runs, 5), min(args.warmup, 1), 1
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    if args.busy_loops < 0:
        ap.error("--busy-loops must be >= 0")
    if not 0 <= args.idle_ms <= 60_000:
        ap.error("--idle-ms must be between 0 and 60000")

    load_at_start = round(os.getloadavg()[0], 2)
    inode_at_start = inode_create_us(args.storage_dir)
    report: dict = {}
    with private_cluster(args.storage_dir):
        report.update(
            measure_raynb(
                args.runs,
                args.warmup,
                floor=not args.skip_floor,
                busy=args.busy_loops,
                idle_s=args.idle_ms / 1000,
            )
        )
    if not args.skip_torchrun:
        report["torchrun_s"] = measure_torchrun(args.torchrun_runs)
        report["speedup_vs_torchrun"] = round(
            report["torchrun_s"]["median"] * 1000 / report["warm_rerun_ms"]["median"], 1
        )
    else:
        report["torchrun_s"] = None
        report["speedup_vs_torchrun"] = None
    report["machine"] = machine_info(
        load_at_start,
        load_avg_1m_at_end=round(os.getloadavg()[0], 2),
        inode_create_us={"at_start": inode_at_start, "at_end": inode_create_us(args.storage_dir)},
        storage_dir=args.storage_dir or tempfile.gettempdir(),
    )
    report["settings"] = {
        "workers": WORKERS,
        "runs": args.runs,
        "warmup": args.warmup,
        "busy_loops": args.busy_loops,
        "idle_ms": args.idle_ms,
        "torchrun_runs": None if args.skip_torchrun else args.torchrun_runs,
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
