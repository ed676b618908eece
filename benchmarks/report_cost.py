"""What one ``raynb.train.report()`` costs: on the rank, in the head and in the client.
Prints one JSON object.

On a private cluster (as ``rerun_latency.py``), ``--rounds`` times in turn:

- a 4-rank ``fit()`` whose every rank calls ``report()`` ``--reports`` times in a tight
  loop (two metrics each), timing each call on the rank (``time.perf_counter_ns``);
- the same fit with no report, for the run's own cost;
- the same loop on the floor prototype (``floor.py``: forked workers, one gloo group, a
  cloudpickled function over ZeroMQ, no signing; its ``report`` is one pickled send).

Keys:

- ``rank_report_us``: one ``report()`` on rank 0: mean, p50, p99, max (µs), over all rounds;
  ``floor_rank_report_us`` the same on the floor.
- ``head_client_cpu_us_per_report``: CPU time (user + system, ``psutil.cpu_times``) of
  the head process and of this (the client) process over the fit with reports, minus
  the fit without, over the reports made (all ranks): ``head``, ``client``, ``total``;
  ``per_report_step`` is the same per step (one report on every rank). The floor's
  client CPU per report is ``floor_client_cpu_us_per_report``.
- ``split_ms`` (medians): submit -> rank 0's function starts; function start -> its
  first report; its last report -> ``Result`` in hand.
- ``ratio_to_floor``: raynb's mean ``report()`` on the rank over the floor's.
- ``machine``: as ``rerun_latency.py``, with the 1-minute load average at start and end.

Usage::

    python -m benchmarks.report_cost               # 3 rounds of 2,000 reports per rank
    python -m benchmarks.report_cost --quick       # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks import rerun_latency  # noqa: E402  (the private cluster and machine helpers)

WORKERS = 4


def reporting_fn(config):
    """``config["n"]`` reports on every rank; rank 0 returns its per-call times (ns)."""
    import time as _time

    from raynb.train import get_context, report

    t_start = _time.time()
    per = []
    for i in range(config["n"]):
        a = _time.perf_counter_ns()
        report({"i": i, "loss": 1.0 / (i + 1)})
        per.append(_time.perf_counter_ns() - a)
    if get_context().get_world_rank() == 0:
        return {"fn_start": t_start, "per_ns": per}
    return None


def floor_reporting_fn(n):
    def fn(report):
        import time as _time

        per = []
        for i in range(n):
            a = _time.perf_counter_ns()
            report({"i": i, "loss": 1.0 / (i + 1)})
            per.append(_time.perf_counter_ns() - a)
        return per

    return fn


def _cpu(proc) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def _us_summary(ns: list[int]) -> dict:
    us = sorted(x / 1000 for x in ns)
    return {
        "mean": round(statistics.fmean(us), 2),
        "p50": round(rerun_latency.quantile(us, 0.5), 2),
        "p99": round(rerun_latency.quantile(us, 0.99), 2),
        "max": round(us[-1], 1),
        "n": len(us),
    }


def measure(reports: int, rounds: int) -> dict:
    import psutil

    import raynb
    from benchmarks.floor import Floor
    from raynb import RunConfig, ScalingConfig
    from raynb.cluster.connection_file import read_connection_file
    from raynb.train.fit_run import execute_run  # what TorchTrainer.fit() runs, with rank 0's value

    def fit(n):
        return execute_run(reporting_fn, {"n": n}, ScalingConfig(num_workers=WORKERS), RunConfig(verbose=0))

    subprocess.run(
        rerun_latency.raynb_cli() + ["start", "--workers", str(WORKERS)],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )
    head = psutil.Process(read_connection_file()["pids"]["head"])
    me = psutil.Process()
    fit(10), fit(0)  # the process group, and the first run's imports
    per_ns, floor_ns, head_us, client_us, floor_client_us = [], [], [], [], []
    dispatch, first, back = [], [], []
    with Floor(WORKERS) as fl:
        fl.run(floor_reporting_fn(10))
        for _ in range(rounds):
            h0, c0 = _cpu(head), _cpu(me)
            fit(0)
            h1, c1 = _cpu(head), _cpu(me)
            wall0 = time.time()
            result, value = fit(reports)
            wall1 = time.time()
            h2, c2 = _cpu(head), _cpu(me)
            made = reports * WORKERS
            head_us.append(((h2 - h1) - (h1 - h0)) / made * 1e6)
            client_us.append(((c2 - c1) - (c1 - c0)) / made * 1e6)
            ret = result.metrics_dataframe  # rank 0's reports, in order
            if len(ret) != reports:
                raise RuntimeError(f"{len(ret)} of {reports} reports came back")
            per_ns += value["per_ns"]
            dispatch.append(value["fn_start"] - wall0)
            first.append(float(ret["timestamp"].iloc[0]) - value["fn_start"])
            back.append(wall1 - float(ret["timestamp"].iloc[-1]))
            r = fl.run(floor_reporting_fn(reports))
            floor_ns += r["returns"][0]
            floor_client_us.append(r["cpu_s"] / made * 1e6)
    raynb.disconnect()
    med = lambda xs: round(statistics.median(xs), 2)  # noqa: E731
    rank = _us_summary(per_ns)
    floor = _us_summary(floor_ns)
    return {
        "rank_report_us": rank,
        "floor_rank_report_us": floor,
        "ratio_to_floor": round(rank["mean"] / floor["mean"], 2),
        "head_client_cpu_us_per_report": {
            "head": med(head_us),
            "client": med(client_us),
            "total": med([h + c for h, c in zip(head_us, client_us)]),
            "per_report_step": med([(h + c) * WORKERS for h, c in zip(head_us, client_us)]),
        },
        "floor_client_cpu_us_per_report": med(floor_client_us),
        "split_ms": {
            "submit_to_rank0_fn_start": med([x * 1000 for x in dispatch]),
            "rank0_fn_start_to_first_report": med([x * 1000 for x in first]),
            "last_report_to_result": med([x * 1000 for x in back]),
        },
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reports", type=int, default=2000, help="reports per rank per fit (default 2000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (fit, fit without reports, floor)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 1 round of 200 reports")
    args = ap.parse_args(argv)
    if args.quick:
        args.reports, args.rounds = min(args.reports, 200), 1
    load_at_start = round(os.getloadavg()[0], 2)
    with rerun_latency.private_cluster():
        out = measure(args.reports, args.rounds)
    out["target"] = {"rank_report_us": 20, "head_client_cpu_us_per_report": 50}
    out["machine"] = rerun_latency.machine_info(
        load_at_start, load_avg_1m_at_end=round(os.getloadavg()[0], 2)
    )
    out["settings"] = {"workers": WORKERS, "reports": args.reports, "rounds": args.rounds}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
