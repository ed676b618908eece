"""The ``raynb`` command: start, status, stop, node, demo."""
from __future__ import annotations

import argparse
import os
import sys


def _mib(n) -> str:
    return f"{n / 2**20:.0f}MiB" if isinstance(n, (int, float)) else "-"


def format_status(st: dict) -> str:
    """Human-readable cluster status: nodes, workers, runs, rejected messages."""
    lines = [f"head {st['address']} (pid {st['pid']}), up {st['uptime_s']:.0f}s, "
             f"rejected messages: {st['rejected_messages']}"]
    for n in st["nodes"]:
        lines.append(f"node {n['node_id']} on {n['hostname']} ({n['ip']}), pid {n['pid']}, "
                     f"warm workers {n['num_workers']} (max {n['max_workers']})")
    lines.append(f"{'worker':<14}{'pid':>8}  {'state':<6}{'rank':>5}  {'cpu%':>6}{'rss':>9}  run")
    for w in sorted(st["workers"], key=lambda w: w["worker_id"]):
        cpu = w.get("cpu_percent")
        lines.append(f"{w['worker_id']:<14}{w['pid']:>8}  {w['state']:<6}"
                     f"{'' if w['rank'] is None else w['rank']:>5}  "
                     f"{'-' if cpu is None else f'{cpu:.0f}':>6}{_mib(w.get('rss')):>9}  {w.get('run') or ''}")
    active = [r for r in st["runs"] if r["state"] in ("PENDING", "RUNNING", "CANCELLING", "FAILING")]
    lines.append(f"runs: {len(st['runs'])} recorded, {len(active)} active")
    for r in active:
        lines.append(f"  {r['name']}  {r['state']}  world size {r['world_size']}")
    return "\n".join(lines)


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="raynb", description="A warm local cluster for distributed "
                                 "PyTorch from Jupyter.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="start the local cluster in the background")
    s.add_argument("--workers", type=_positive_int, default=4, help="warm workers to keep (default 4)")
    s.add_argument("--max-workers", type=_positive_int, default=None, help="most workers this machine may hold")
    s.add_argument("--host", default="127.0.0.1", help="interface the head listens on")
    s.add_argument("--port", type=int, default=0, help="port the head listens on (0: any free)")
    sub.add_parser("status", help="show nodes, workers and runs")
    sub.add_parser("stop", help="stop the local cluster and all its processes")
    n = sub.add_parser("node", help="join this machine to a head as a node agent")
    n.add_argument("--address", required=True, help="the head's tcp://HOST:PORT")
    n.add_argument("--workers", type=_positive_int, default=4, help="warm workers to keep on this machine")
    n.add_argument("--key", default=None, help="cluster key (default: $RAYNB_KEY)")
    d = sub.add_parser("demo", help="train a CNN on scikit-learn digits on the warm cluster")
    d.add_argument("--workers", type=_positive_int, default=4, help="ranks (world size), default 4")
    d.add_argument("--epochs", type=_positive_int, default=12, help="epochs per run, default 12")
    args = ap.parse_args(argv)

    from .errors import ClusterError

    try:
        if args.cmd == "start":
            from .cluster import start_cluster

            info, started = start_cluster(args.workers, args.max_workers, host=args.host, port=args.port)
            from .connection import connection_file_path

            print(f"raynb cluster {'started' if started else 'already running'} at {info['address']} "
                  f"(head pid {info['pids']['head']}); connection file: {connection_file_path()}")
        elif args.cmd == "status":
            from .cluster import running_cluster
            from .client import Client

            info = running_cluster()
            if info is None:
                print("no raynb cluster is running (start one with `raynb start`)")
                return 1
            c = Client(info["address"], info["key"].encode(), info)
            print(format_status(c.status()))
            c.close()
        elif args.cmd == "stop":
            from .cluster import stop_cluster

            print("raynb cluster stopped" if stop_cluster() else "no raynb cluster was running")
        elif args.cmd == "node":
            from .node import main as node_main

            if args.key:
                os.environ["RAYNB_KEY"] = args.key
            return node_main(["--address", args.address, "--workers", str(args.workers)])
        elif args.cmd == "demo":
            from .demo import run_demo

            return run_demo(args.workers, args.epochs)
    except ClusterError as e:
        print(f"raynb: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
