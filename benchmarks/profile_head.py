"""Where an idle head's CPU goes while many node agents heartbeat into it: a head alone
(``--workers 0``) run under ``python -m cProfile``, simulated node agents (``sim_nodes.py``)
added, the head's CPU share sampled over ``--seconds``, then the head stopped (SIGTERM, a
clean exit that writes the profile) and its top functions printed.

Usage::

    python -m benchmarks.profile_head --nodes 1000 --seconds 20
    python -m benchmarks.profile_head --nodes 1000 --top 40 --sort cumulative
    python -m benchmarks.profile_head --quick            # 20 nodes, 2 s (a smoke test)

Prints one JSON object (head CPU %, heartbeat latency, the top functions by own time);
``--profile-out FILE`` keeps the cProfile file for ``python -m pstats``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def start_head(tmp: str, prof: str) -> tuple[subprocess.Popen, dict]:
    """A head alone under cProfile; returns its process and connection info."""
    from raynb.cluster.connection_file import read_connection_file
    from raynb.cluster.protocol import messages

    env = dict(os.environ, RAYNB_KEY=messages.new_key().decode())
    cmd = [sys.executable, *(["-m", "cProfile", "-o", prof] if prof else []), "-m", "raynb.cluster.head"]
    cmd += ["--workers", "0"]
    log = open(os.path.join(tmp, "head.out"), "wb")
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while (info := read_connection_file()) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the head did not start: " + open(log.name).read()[-2000:])
        time.sleep(0.05)
    return proc, info


def top_functions(prof: str, sort: str, n: int) -> list[dict]:
    st = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (file, line, name), (cc, nc, tt, ct, _) in st.stats.items():
        rows.append(
            {
                "function": f"{os.path.basename(file)}:{line}({name})",
                "calls": nc,
                "own_s": round(tt, 4),
                "cumulative_s": round(ct, 4),
            }
        )
    key = "own_s" if sort == "tottime" else "cumulative_s"
    return sorted(rows, key=lambda r: -r[key])[:n]


def _place(info: dict, sim, args) -> tuple:
    """Runs of ``--place-ranks`` ranks over the nodes' simulated workers (one each, as in
    ``scale_nodes.py``'s placement): the seconds from the call to the last task's arrival."""
    from benchmarks import scale_nodes
    from benchmarks.sim_nodes import SimWorkers
    from raynb import RunConfig, ScalingConfig, TorchTrainer
    from raynb.cluster.protocol.control import Client

    workers = SimWorkers(info["address"], info["key"].encode())
    for name in sim.names:
        workers.add(name, 1)
    client = Client(info["address"], info["key"].encode(), info)
    try:
        while len(client.status(timeout=60)["workers"]) < args.nodes:
            time.sleep(0.1)
    finally:
        client.close()
    out = []
    for _ in range(args.place_runs):
        t0 = time.monotonic()
        TorchTrainer(
            scale_nodes.trivial_train_fn,
            scaling_config=ScalingConfig(num_workers=args.place_ranks),
            run_config=RunConfig(verbose=0),
        ).fit()
        runs = [r for r, ts in workers.tasks.items() if min(ts) >= t0]
        out.append(max(workers.arrivals(runs[0])) - t0)
    return workers, out


def run(args, tmp: str) -> dict:
    import psutil

    from benchmarks.sim_nodes import SimNodes

    prof = None if args.no_cprofile else args.profile_out or os.path.join(tmp, "head.prof")
    proc, info = start_head(tmp, prof)
    sim = workers = None
    place = []
    try:
        sim = SimNodes(
            info["address"],
            info["key"].encode(),
            workers_per_node=1 if args.place_ranks else 0,
            follow_pace=not args.no_pace,
        )
        reg = sim.grow(args.nodes, timeout=max(60.0, args.nodes / 10))
        if args.place_ranks:
            workers, place = _place(info, sim, args)
        time.sleep(args.settle)  # registrations settle; the idle nodes asked for fewer heartbeats
        head = psutil.Process(proc.pid)
        sim.take_rtts()
        head.cpu_percent(None)
        threads0 = {t.id: t.user_time + t.system_time for t in head.threads()}
        time.sleep(args.seconds)
        cpu = head.cpu_percent(None)
        threads = {
            ("main" if t.id == proc.pid else str(t.id)): round(
                100 * (t.user_time + t.system_time - threads0.get(t.id, 0.0)) / args.seconds, 1
            )
            for t in head.threads()
        }
        rtts = sorted(sim.take_rtts())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        for s in (workers, sim):
            if s is not None:
                s.close()
    return {
        "nodes": args.nodes,
        "register_s": round(reg, 3),
        "head_cpu_percent": round(cpu, 1),
        "thread_cpu_percent": threads,
        "heartbeat_ms_median": round(1000 * rtts[len(rtts) // 2], 3) if rtts else None,
        "heartbeats": len(rtts),
        "place_ms": [round(1000 * t, 2) for t in place],
        "top": top_functions(prof, args.sort, args.top) if prof else [],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20.0, help="the CPU window (s)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--sort", choices=("tottime", "cumulative"), default="tottime")
    ap.add_argument("--profile-out", default=None, help="keep the cProfile file here")
    ap.add_argument("--no-cprofile", action="store_true", help="the head's CPU without the profiler's")
    ap.add_argument("--place-ranks", type=int, default=0, help="then place runs of this many ranks")
    ap.add_argument("--place-runs", type=int, default=20)
    ap.add_argument(
        "--settle",
        type=float,
        default=13.0,
        help="seconds before the CPU window: the head asks nodes idle 10 s for fewer heartbeats",
    )
    ap.add_argument("--no-pace", action="store_true", help="nodes ignore stats_every: one heartbeat a second")
    ap.add_argument("--quick", action="store_true", help="20 nodes, 2 s")
    args = ap.parse_args(argv)
    if args.quick:
        args.nodes, args.seconds, args.settle = 20, 2.0, 1.0
    tmp = tempfile.mkdtemp(prefix="raynb-profile-head-")
    os.makedirs(os.path.join(tmp, "home"), mode=0o700)
    os.environ.update(RAYNB_HOME=os.path.join(tmp, "home"), RAYNB_STORAGE_PATH=os.path.join(tmp, "results"))
    load0 = open("/proc/loadavg").read().split()[:3]
    try:
        out = run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["loadavg"] = [load0, open("/proc/loadavg").read().split()[:3]]
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
