"""How the head's costs grow with the node agents that heartbeat into it. Prints one JSON object.

A private cluster (its own temporary ``RAYNB_HOME`` and ``RAYNB_STORAGE_PATH``) with 2 real
local workers; then simulated node agents (``sim_nodes.py``: one process, the real signed
protocol, one socket and routing id each, a ``node_stats`` heartbeat a second) are added
up to each of ``--sizes``. At each size, while every node heartbeats:

- ``head_cpu_percent``: the head process's CPU over ``--window`` s (100 = one core), taken
  ``--settle`` s after that size's nodes registered (by then the head has asked the idle
  ones for fewer heartbeats: ``head/node_pace.py``; ``--no-pace``: the simulated nodes
  ignore the ask and send one a second, as agents before it did);
- ``heartbeats_per_s``: the simulated nodes' heartbeats during that window;
- ``head_rss_mb`` and ``rss_per_node_kb``: its resident memory, and what each node added
  to it over the head with no simulated nodes;
- ``heartbeat_ms``: a node's ``node_stats`` sent -> the head's ``pong`` received, for the
  heartbeats that ask for one (as a real agent, one that heard nothing from the head for
  ``agent.STATS_REPLY_S``; with ``--quick``, every one);
- ``ping_ms`` / ``status_ms``: a client's ``ping`` / ``status_request`` round trip (the
  status reply lists every node, so it grows with them by nature);
- ``warm_rerun_ms``: a real client's ``TorchTrainer.fit()`` of a trivial function (one
  all-reduce, one report) on the 2 local workers, submit -> Result, which includes placing
  it. The simulated nodes here host no ranks (``max_workers`` 0); ``placement`` below
  places runs over simulated nodes that do.
- ``register_s``: the time for the head to acknowledge that size's new nodes.

``placement``: a second cluster, a head alone (``head_only``), and simulated nodes that
each register one worker (``sim_nodes.SimWorkers``: a worker's socket and signed session,
answering each ``run_task`` with a ``task_done`` at once, the function not run), up to
each of ``--place-sizes``. At each size, ``--place-runs`` runs of ``--place-ranks`` ranks
(64: one per node, 64 nodes, the most nodes a run of that size can span):

- ``place_ms``: ``TorchTrainer.fit()`` called -> the last rank's ``run_task`` received
  (the client's submit, the head's checks, run directory, placement and signed tasks),
  ``first`` (a process group formed anew) and the ``median`` of the rest (the group
  reused, as a warm re-run does);
- ``fit_ms``: the same runs, call -> ``Result`` (every rank's ``task_done`` back).

``misbehaving``: with the largest size up, one node floods heartbeats back to back and
another registers twice; the others' heartbeat latency and a client's ping are measured
meanwhile, and the head's node count checked after.

Usage::

    python -m benchmarks.scale_nodes                     # 10, 100, 1000 nodes
    python -m benchmarks.scale_nodes --quick             # seconds, small sizes (the tests)
    python -m benchmarks.scale_nodes --sizes 1000 --place-sizes 100,1000   # 64 ranks placed
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
    return {
        "median": round(statistics.median(v) * 1000, 3),
        "p90": round(v[int(0.9 * (len(v) - 1))] * 1000, 3),
        "min": round(v[0] * 1000, 3),
        "n": len(v),
    }


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def measure(head, client, sim, fit, args) -> dict:
    """The figures at the current node count (see the module's docstring)."""
    if sim is not None and args.settle:
        time.sleep(args.settle)
    sim and sim.take_rtts()
    sent0 = sim.sent if sim else 0
    head.cpu_percent(None)
    time.sleep(args.window)
    cpu = head.cpu_percent(None)
    beats = (sim.sent - sent0) / args.window if sim else 0.0
    rtts = sim.take_rtts() if sim else []
    ping = timed(lambda: client.request("ping", reply_types=("pong",), timeout=30), args.pings)
    st = timed(lambda: client.status(timeout=60), max(3, args.pings // 5))
    runs = timed(fit, args.runs)
    return {
        "head_cpu_percent": round(cpu, 1),
        "heartbeats_per_s": round(beats, 1),
        "head_rss_mb": round(head.memory_info().rss / 2**20, 2),
        "heartbeat_ms": summary(rtts),
        "ping_ms": summary(ping),
        "status_ms": summary(st),
        "warm_rerun_ms": summary(runs),
        "nodes_in_status": len(client.status()["nodes"]),
    }


def misbehaving(client, sim, args) -> dict:
    """One node floods heartbeats, another registers twice: the others must not suffer."""
    sim.take_rtts()
    sent0, flooded0 = sim.sent, sim.flooded
    sim.flood(0, args.window)
    sim.register_twice(1 % len(sim.socks))
    ping = timed(lambda: client.request("ping", reply_types=("pong",), timeout=30), args.pings)
    time.sleep(max(0.0, args.window - sum(ping)) + 0.5)
    rtts = sim.take_rtts()
    return {
        "flood_s": args.window,
        "flood_heartbeats_sent": sim.flooded - flooded0,
        "others_heartbeats_sent": sim.sent - sent0,
        "ping_ms": summary(ping),
        "others_heartbeat_ms": summary(rtts),
        "nodes_in_status": len(client.status()["nodes"]),
        "nodes_expected": len(sim.socks) + 1,
    }


def placement(args) -> list[dict]:
    """Runs of ``args.place_ranks`` ranks placed over simulated nodes of one worker each."""
    from benchmarks.sim_nodes import SimNodes, SimWorkers
    from raynb import RunConfig, ScalingConfig, TorchTrainer
    from raynb.cluster.launch.local import start_cluster, stop_cluster
    from raynb.cluster.protocol.control import Client

    info, _ = start_cluster(head_only=True)
    client = Client(info["address"], info["key"].encode(), info)
    sim = workers = None
    out = []
    try:
        sim = SimNodes(
            info["address"], info["key"].encode(), workers_per_node=1, follow_pace=not args.no_pace
        )
        workers = SimWorkers(info["address"], info["key"].encode())
        for n in args.place_sizes:
            first = len(sim.socks)
            sim.grow(n - first, timeout=max(60.0, n / 10))
            for name in sim.names[first:]:
                workers.add(name, 1)
            deadline = time.monotonic() + max(60.0, n / 10)
            while len(client.status(timeout=60)["workers"]) < n:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the simulated workers of {n} nodes did not all join")
                time.sleep(0.1)
            place, fit = [], []
            for _ in range(args.place_runs):
                t0 = time.monotonic()
                TorchTrainer(
                    trivial_train_fn,
                    scaling_config=ScalingConfig(num_workers=args.place_ranks),
                    run_config=RunConfig(verbose=0),
                ).fit()
                fit.append(time.monotonic() - t0)
                runs = [r for r, ts in workers.tasks.items() if min(ts) >= t0]
                arrived = workers.arrivals(runs[0]) if len(runs) == 1 else []
                if len(arrived) != args.place_ranks:
                    raise RuntimeError(f"{len(arrived)} of {args.place_ranks} ranks got their task")
                place.append(max(arrived) - t0)
            m = {
                "nodes": n,
                "ranks": args.place_ranks,
                "place_ms": {"first": round(place[0] * 1000, 2), **summary(place[1:])},
                "fit_ms": {"first": round(fit[0] * 1000, 2), **summary(fit[1:])},
            }
            out.append(m)
            print(json.dumps(m), file=sys.stderr, flush=True)
        return out
    finally:
        client.close()
        stop_cluster()
        for s in (workers, sim):
            if s is not None:
                s.close()


def run(args) -> dict:
    import psutil

    from benchmarks.sim_nodes import SimNodes
    from raynb import RunConfig, ScalingConfig, TorchTrainer
    from raynb.cluster.launch.local import start_cluster, stop_cluster
    from raynb.cluster.protocol.control import Client

    def fit():
        r = TorchTrainer(
            trivial_train_fn,
            scaling_config=ScalingConfig(num_workers=WORKERS),
            run_config=RunConfig(verbose=0),
        ).fit()
        if r.metrics.get("sum") != sum(range(1, WORKERS + 1)):
            raise RuntimeError(f"a run went wrong: {r!r}")

    info, _ = start_cluster(num_workers=WORKERS)
    client = Client(info["address"], info["key"].encode(), info)
    sim = None
    try:
        head = psutil.Process(info["pids"]["head"])
        for _ in range(2):
            fit()  # the process group forms; what follows is warm
        out: dict = {"baseline": measure(head, client, None, fit, args), "sizes": []}
        base_rss = head.memory_info().rss
        sim = SimNodes(
            info["address"],
            info["key"].encode(),
            reply_every_s=args.reply_every,
            follow_pace=not args.no_pace,
        )
        for n in args.sizes:
            reg = sim.grow(n - len(sim.socks), timeout=max(60.0, n / 10))
            m = measure(head, client, sim, fit, args)
            m = {
                "nodes": n,
                "register_s": round(reg, 3),
                **m,
                "rss_per_node_kb": round((head.memory_info().rss - base_rss) / n / 1024, 2),
            }
            out["sizes"].append(m)
            print(json.dumps(m), file=sys.stderr, flush=True)
        if sim.socks:
            out["misbehaving"] = misbehaving(client, sim, args)
        base = out["baseline"]["warm_rerun_ms"]["median"]
        out["rerun_ratio_to_baseline"] = {
            str(m["nodes"]): round(m["warm_rerun_ms"]["median"] / base, 2) for m in out["sizes"]
        }
        return out
    finally:
        client.close()
        stop_cluster()
        if sim is not None:
            sim.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=None, help="node counts, comma-separated (default 10,100,1000)")
    ap.add_argument(
        "--window", type=float, default=None, help="seconds the head's CPU is sampled (default 5)"
    )
    ap.add_argument("--pings", type=int, default=None, help="pings timed at each size (default 50)")
    ap.add_argument("--runs", type=int, default=None, help="warm re-runs timed at each size (default 9)")
    ap.add_argument(
        "--place-sizes", default=None, help="node counts for placing runs, comma-separated (default 100,1000)"
    )
    ap.add_argument("--place-ranks", type=int, default=None, help="ranks of each placed run (default 64)")
    ap.add_argument("--place-runs", type=int, default=None, help="runs placed at each size (default 11)")
    ap.add_argument(
        "--reply-every",
        type=float,
        default=None,
        help="a simulated heartbeat asks for the head's pong after this many seconds without word "
        "from it (default: a real agent's, 5; 0: every heartbeat asks, as an agent before protocol "
        "2.3; --quick: 0, so its short windows see pongs)",
    )
    ap.add_argument(
        "--settle",
        type=float,
        default=None,
        help="seconds between a size's nodes registered and its CPU window (default: long enough "
        "for the head to ask the idle nodes for fewer heartbeats, 13; --quick: 0)",
    )
    ap.add_argument(
        "--no-pace",
        action="store_true",
        help="simulated nodes ignore the head's stats_every and heartbeat every second",
    )
    ap.add_argument("--quick", action="store_true", help="5 and 20 nodes, short windows (seconds)")
    args = ap.parse_args(argv)
    q = args.quick
    sizes = args.sizes if args.sizes is not None else ("5,20" if q else "10,100,1000")
    args.sizes = [int(s) for s in sizes.split(",") if s]
    places = args.place_sizes if args.place_sizes is not None else ("12" if q else "100,1000")
    args.place_sizes = [int(s) for s in places.split(",") if s]
    args.place_ranks = args.place_ranks or (8 if q else 64)
    args.place_runs = args.place_runs or (3 if q else 11)
    if args.reply_every is None and q:
        args.reply_every = 0.0
    args.window = args.window or (1.0 if q else 5.0)
    if args.settle is None:
        args.settle = 0.0 if q else 13.0
    args.pings = args.pings or (10 if q else 50)
    args.runs = args.runs or (3 if q else 9)
    tmp = tempfile.mkdtemp(prefix="raynb-scale-nodes-")
    os.makedirs(os.path.join(tmp, "home"), mode=0o700)
    os.environ.update(RAYNB_HOME=os.path.join(tmp, "home"), RAYNB_STORAGE_PATH=os.path.join(tmp, "results"))
    os.environ.pop("RAYNB_KEY", None)
    load0 = open("/proc/loadavg").read().split()[:3]
    try:
        out = run(args) if args.sizes else {}
        if args.place_sizes:
            out["placement"] = placement(args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["settings"] = {
        "sizes": args.sizes,
        "window_s": args.window,
        "pings": args.pings,
        "runs": args.runs,
        "workers": WORKERS,
        "place_sizes": args.place_sizes,
        "place_ranks": args.place_ranks,
        "place_runs": args.place_runs,
        "reply_every_s": args.reply_every,
        "settle_s": args.settle,
        "follow_pace": not args.no_pace,
        "idle_heartbeat_s": os.environ.get("RAYNB_IDLE_HEARTBEAT_S", "default"),
        "quick": q,
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
