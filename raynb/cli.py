"""The ``raynb`` command: start, status, stop, node, demo; ``raynb --version``; a bare
``raynb`` prints the help (exit status 0)."""
from __future__ import annotations

import argparse
import sys

from .client.status import format_status
from .notebook.magic_args import positive_int


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return n


def main(argv=None) -> int:
    from . import __version__

    ap = argparse.ArgumentParser(prog="raynb", description="A warm local cluster for distributed "
                                 "PyTorch from Jupyter.")
    ap.add_argument("--version", action="version", version=f"raynb {__version__}")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    s = sub.add_parser("start", help="start the local cluster in the background")
    s.add_argument("--workers", type=non_negative_int, default=4,
                   help="warm workers to keep on this machine (default 4; 0: a head alone)")
    s.add_argument("--max-workers", type=positive_int, default=None, help="most workers this machine may hold")
    s.add_argument("--host", default="127.0.0.1", help="address of the interface the head listens on "
                   "(default 127.0.0.1; off loopback every link is CurveZMQ and it prints how to join)")
    s.add_argument("--port", type=int, default=0, help="port the head listens on (0: any free)")
    s.add_argument("--idle-timeout", type=float, default=None, metavar="S",
                   help="seconds a worker forked beyond --workers may stay idle before it is "
                        "retired (default $RAYNB_WORKER_IDLE_TIMEOUT_S, else 60)")
    s.add_argument("--key-file", default=None, help="head-keys.json from `raynb keygen`: the same keys "
                   "across restarts (node agents reconnect to a restarted head)")
    k = sub.add_parser("keygen", help="make a cluster's keys: DIR/head-keys.json, DIR/cluster-keys.json")
    k.add_argument("dir", help="directory for the two key files (mode 0600 each)")
    sub.add_parser("status", help="show nodes, workers and runs")
    sub.add_parser("stop", help="stop the local cluster and all its processes")
    n = sub.add_parser("node", help="join this machine to a head as a node agent")
    n.add_argument("--address", required=True, help="the head's tcp://HOST:PORT")
    n.add_argument("--workers", type=non_negative_int, default=4, help="warm workers to keep on this machine")
    n.add_argument("--key-file", default=None, help="the head's connection file, copied here (mode 0600)")
    n.add_argument("--key", default=None, help="cluster key for a loopback head (default: $RAYNB_KEY)")
    n.add_argument("--gpus", type=non_negative_int, default=None, help="CUDA devices to offer (default: all)")
    n.add_argument("--node-ip", default=None, help="IP to register, for gloo/NCCL and the rank-0 store "
                   "(default $RAYNB_NODE_IP, else the interface that routes to the head)")
    n.add_argument("--node-id", default=None, help="this node's name (default random)")
    n.add_argument("--max-workers", type=positive_int, default=None, help="most workers this node may hold")
    n.add_argument("--shared-storage", action="store_true",
                   help="this host mounts the head's storage_path at the same path (else checkpoints stream)")
    n.add_argument("--reconnect", type=float, default=60.0, metavar="S",
                   help="seconds to keep registering again after losing the head (default 60)")
    d = sub.add_parser("demo", help="train a CNN on scikit-learn digits on the warm cluster")
    d.add_argument("--workers", type=positive_int, default=4, help="ranks (world size), default 4")
    d.add_argument("--epochs", type=positive_int, default=12, help="epochs per run, default 12")
    args = ap.parse_args(argv)
    if args.cmd is None:   # a bare `raynb`: what it can do, not "arguments are required: cmd"
        ap.print_help()
        return 0

    from .errors import ClusterError

    try:
        if args.cmd == "start":
            from .cluster.launch.local import start_cluster

            try:
                info, started = start_cluster(args.workers, args.max_workers, host=args.host,
                                              port=args.port, idle_timeout_s=args.idle_timeout,
                                              key_file=args.key_file)
            except ValueError as e:
                ap.error(str(e))
            from .cluster.connection import connection_file_path

            print(f"raynb cluster {'started' if started else 'already running'} at {info['address']} "
                  f"(head pid {info['pids']['head']}); connection file: {connection_file_path()}")
            from .cluster.launch.local import join_command

            join = join_command(info, connection_file_path())
            if join:
                print(f"CurveZMQ on; to join a host, copy the connection file there (mode 0600) and run:\n"
                      f"  {join}")
        elif args.cmd == "keygen":
            from .cluster.curve import write_keys

            head, peers = write_keys(args.dir)
            print(f"{head}: for the head (`raynb start --key-file`) only, it holds the server's secret key\n"
                  f"{peers}: for node agents and clients (`--key-file`, raynb.connect(addr, key_file=...))")
        elif args.cmd == "status":
            from .cluster.control import Client
            from .cluster.launch.local import running_cluster

            info = running_cluster()
            if info is None:
                print("no raynb cluster is running (start one with `raynb start`)")
                return 1
            c = Client(info["address"], info["key"].encode(), info)
            print(format_status(c.status()))
            c.close()
        elif args.cmd == "stop":
            from .cluster.launch.local import stop_cluster

            print("raynb cluster stopped" if stop_cluster() else "no raynb cluster was running")
        elif args.cmd == "node":
            import logging
            import signal

            from .cluster.launch.static import run_node

            logging.basicConfig(level=logging.INFO, format="%(asctime)s node %(levelname)s %(message)s")
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            return run_node(args.address, args.key_file, args.workers, args.gpus, args.node_ip,
                            key=args.key, max_workers=args.max_workers, node_id=args.node_id,
                            shared_storage=args.shared_storage, reconnect_s=args.reconnect)
        elif args.cmd == "demo":
            from .demo import run_demo

            return run_demo(args.workers, args.epochs)
    except ClusterError as e:
        print(f"raynb: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
