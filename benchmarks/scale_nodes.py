"""How the head's costs grow with the node agents that heartbeat into it. Prints one JSON object.

A private cluster (its own temporary ``RAYNB_HOME`` and ``RAYNB_STORAGE_PATH``) with 2 real
local workers; then simulated node agents (``sim_nodes.py``: one process, the real signed
protocol, one socket and routing id each, a ``node_stats`` heartbeat a second) are added
up to each of ``--sizes``. At each size, while every node heartbeats:

- ``head_cpu_percent``: the head process's CPU over ``--window`` s (100 = one core);
- ``head_rss_mb`` and ``rss_per_node_kb``: its resident memory, and what each node added
  to it over the head with no simulated nodes;
- ``heartbeat_ms``: a node's ``node_stats`` sent -> the head's ``pong`` received;
- ``ping_ms`` / ``status_ms``: a client's ``ping`` / ``status_request`` round trip (the
  status reply lists every node, so it grows with them by nature);
- ``warm_rerun_ms``: a real client's ``TorchTrainer.fit()`` of a trivial function (one
  all-reduce, one report) on the 2 local workers, submit -> Result, which includes placing
  it. The simulated nodes host no ranks (``max_workers`` 0): placing a 64-rank run over
  them would need 64 simulated workers speaking the task protocol, which this does not
  simulate; ``status_ms`` and ``warm_rerun_ms`` stand in for it.
- ``register_s``: the time for the head to acknowledge that size's new nodes.

``misbehaving``: with the largest size up, one node floods heartbeats back to back and
another registers twice; the others' heartbeat latency and a client's ping are measured
meanwhile, and the head's node count checked after.

Usage::

    python benchmarks/scale_nodes.py                     # 10, 100, 1000 nodes
    python benchmarks/scale_nodes.py --quick             # seconds, small sizes (the tests)
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

WORKERS = 2


def trivial_train_fn():
    """One all-reduce and one report on every rank."""
    import torch
    import torch.distributed as dist

    from raynb.train import report

    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    report({"sum": t.item()})


def summary(values_s: list[float]) -> dict:
    """median / p90 / min / n of seconds, in ms."""
    if not values_s:
        return {"median": None, "p90": None, "min": None, "n": 0}
    v = sorted(values_s)
    return {"median": round(statistics.median(v) * 1000, 3), "p90": round(v[int(0.9 * (len(v) - 1))] * 1000, 3),
            "min": round(v[0] * 1000, 3), "n": len(v)}


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def measure(head, client, sim, fit, args) -> dict:
    """The figures at the current node count (see the module's docstring)."""
    sim and sim.take_rtts()
    head.cpu_percent(None)
    time.sleep(args.window)
    cpu = head.cpu_percent(None)
    rtts = sim.take_rtts() if sim else []
    ping = timed(lambda: client.request("ping", reply_types=("pong",), timeout=30), args.pings)
    st = timed(lambda: client.status(timeout=60), max(3, args.pings // 5))
    runs = timed(fit, args.runs)
    return {"head_cpu_percent": round(cpu, 1), "head_rss_mb": round(head.memory_info().rss / 2**20, 2),
            "heartbeat_ms": summary(rtts), "ping_ms": summary(ping), "status_ms": summary(st),
            "warm_rerun_ms": summary(runs), "nodes_in_status": len(client.status()["nodes"])}


def misbehaving(client, sim, args) -> dict:
    """One node floods heartbeats, another registers twice: the others must not suffer."""
    sim.take_rtts()
    sent0, flooded0 = sim.sent, sim.flooded
    sim.flood(0, args.window)
    sim.register_twice(1 % len(sim.socks))
    ping = timed(lambda: client.request("ping", reply_types=("pong",), timeout=30), args.pings)
    time.sleep(max(0.0, args.window - sum(ping)) + 0.5)
    rtts = sim.take_rtts()
    return {"flood_s": args.window, "flood_heartbeats_sent": sim.flooded - flooded0,
            "others_heartbeats_sent": sim.sent - sent0, "ping_ms": summary(ping),
            "others_heartbeat_ms": summary(rtts),
            "nodes_in_status": len(client.status()["nodes"]), "nodes_expected": len(sim.socks) + 1}


def run(args) -> dict:
    from raynb import RunConfig, ScalingConfig, TorchTrainer
    from raynb.cluster.protocol.control import Client
    from raynb.cluster.launch.local import start_cluster, stop_cluster
    import psutil
    from sim_nodes import SimNodes

    def fit():
        r = TorchTrainer(trivial_train_fn, scaling_config=ScalingConfig(num_workers=WORKERS),
                         run_config=RunConfig(verbose=0)).fit()
        if r.metrics.get("sum") != sum(range(1, WORKERS + 1)):
            raise RuntimeError(f"a run went wrong: {r!r}")

    info, _ = start_cluster(num_workers=WORKERS)
    client = Client(info["address"], info["key"].encode(), info)
    sim = None
    try:
        head = psutil.Process(info["pids"]["head"])
        for _ in range(2):
            fit()   # the process group forms; what follows is warm
        out: dict = {"baseline": measure(head, client, None, fit, args), "sizes": []}
        base_rss = head.memory_info().rss
        sim = SimNodes(info["address"], info["key"].encode())
        for n in args.sizes:
            reg = sim.grow(n - len(sim.socks), timeout=max(60.0, n / 10))
            m = measure(head, client, sim, fit, args)
            m = {"nodes": n, "register_s": round(reg, 3), **m,
                 "rss_per_node_kb": round((head.memory_info().rss - base_rss) / n / 1024, 2)}
            out["sizes"].append(m)
            print(json.dumps(m), file=sys.stderr, flush=True)
        if sim.socks:
            out["misbehaving"] = misbehaving(client, sim, args)
        base = out["baseline"]["warm_rerun_ms"]["median"]
        out["rerun_ratio_to_baseline"] = {str(m["nodes"]): round(m["warm_rerun_ms"]["median"] / base, 2)
                                          for m in out["sizes"]}
        return out
    finally:
        client.close()
        stop_cluster()
        if sim is not None:
            sim.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=None, help="node counts, comma-separated (default 10,100,1000)")
    ap.add_argument("--window", type=float, default=None, help="seconds the head's CPU is sampled (default 5)")
    ap.add_argument("--pings", type=int, default=None, help="pings timed at each size (default 50)")
    ap.add_argument("--runs", type=int, default=None, help="warm re-runs timed at each size (default 9)")
    ap.add_argument("--quick", action="store_true", help="5 and 20 nodes, short windows (seconds)")
    args = ap.parse_args(argv)
    q = args.quick
    args.sizes = [int(s) for s in (args.sizes or ("5,20" if q else "10,100,1000")).split(",")]
    args.window = args.window or (1.0 if q else 5.0)
    args.pings = args.pings or (10 if q else 50)
    args.runs = args.runs or (3 if q else 9)
    tmp = tempfile.mkdtemp(prefix="raynb-scale-nodes-")
    os.makedirs(os.path.join(tmp, "home"), mode=0o700)
    os.environ.update(RAYNB_HOME=os.path.join(tmp, "home"), RAYNB_STORAGE_PATH=os.path.join(tmp, "results"))
    os.environ.pop("RAYNB_KEY", None)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    load0 = open("/proc/loadavg").read().split()[:3]
    try:
        out = run(args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["settings"] = {"sizes": args.sizes, "window_s": args.window, "pings": args.pings, "runs": args.runs,
                       "workers": WORKERS, "quick": q}
    out["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                      "loadavg_at_start": load0, "loadavg_at_end": open("/proc/loadavg").read().split()[:3]}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
