"""The ``raynb`` command: start, status, stop, node, run, demo; ``raynb --version``; a bare
``raynb`` prints the help (exit status 0)."""

from __future__ import annotations

import argparse
import os
import sys

from .client.status import format_status
from .notebook.magics.arguments import positive_int


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return n


def build_parser() -> argparse.ArgumentParser:
    """The ``raynb`` command line: one subcommand per entry of :data:`COMMANDS`."""
    from . import __version__

    ap = argparse.ArgumentParser(
        prog="raynb", description="A warm local cluster for distributed PyTorch from Jupyter."
    )
    ap.add_argument("--version", action="version", version=f"raynb {__version__}")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    _add_start(sub)
    k = sub.add_parser("keygen", help="make a cluster's keys: DIR/head-keys.json, DIR/cluster-keys.json")
    k.add_argument("dir", help="directory for the two key files (mode 0600 each)")
    sub.add_parser("status", help="show nodes, workers and runs")
    sub.add_parser("stop", help="stop the local cluster and all its processes")
    _add_node(sub)
    add_job_commands(sub)
    r = sub.add_parser(
        "run",
        help="run an unchanged Ray Train/Tune/Data script on raynb "
        "(`import ray` served by raynb; see docs/coming-from-ray.md)",
    )
    r.add_argument("script", help="the Python script, run as __main__")
    r.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    d = sub.add_parser("demo", help="train a CNN on scikit-learn digits on the warm cluster")
    d.add_argument("--workers", type=positive_int, default=4, help="ranks (world size), default 4")
    d.add_argument("--epochs", type=positive_int, default=12, help="epochs per run, default 12")
    return ap


def _add_start(sub) -> None:
    s = sub.add_parser("start", help="start the local cluster in the background")
    s.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="warm workers to keep (default 4; with --ray: per Ray node, default its free CPUs)",
    )
    s.add_argument(
        "--head-only",
        action="store_true",
        help="no workers on this machine: only those of the nodes that join",
    )
    s.add_argument(
        "--max-workers",
        type=positive_int,
        default=None,
        help="most workers this machine may hold (default: the larger of 16 and 4 x its cores)",
    )
    s.add_argument(
        "--host",
        default="127.0.0.1",
        help="address of the interface the head listens on "
        "(default 127.0.0.1; off loopback every link is CurveZMQ and it prints how to join)",
    )
    s.add_argument("--port", type=int, default=0, help="port the head listens on (0: any free)")
    s.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds a worker forked beyond --workers may stay idle before it is "
        "retired (default $RAYNB_WORKER_IDLE_TIMEOUT_S, else 60)",
    )
    s.add_argument(
        "--ray",
        action="store_true",
        help="run on a Ray cluster: the head and one node "
        "agent per Ray node as Ray actors (needs raynb[ray]); --workers is per node",
    )
    s.add_argument(
        "--ray-address",
        default=None,
        metavar="auto|HOST:PORT",
        help="the Ray cluster for --ray (default auto: the one on this machine)",
    )
    s.add_argument(
        "--key-file",
        default=None,
        help="head-keys.json from `raynb keygen`: the same keys "
        "across restarts (node agents reconnect to a restarted head)",
    )
    s.add_argument(
        "--preload",
        default=None,
        metavar="NAMES",
        help="frameworks the workers start with (comma-separated: lightning, transformers, "
        "tensorflow, this in its own zygote): their first fit starts warm; a slower start, more "
        "memory (default $RAYNB_PRELOAD; a node that joins reads its own)",
    )


def _add_node(sub) -> None:
    n = sub.add_parser("node", help="join this machine to a head as a node agent")
    n.add_argument("--address", required=True, help="the head's tcp://HOST:PORT")
    n.add_argument("--workers", type=non_negative_int, default=4, help="warm workers to keep on this machine")
    n.add_argument("--key-file", default=None, help="the head's connection file, copied here (mode 0600)")
    n.add_argument("--key", default=None, help="cluster key for a loopback head (default: $RAYNB_KEY)")
    n.add_argument("--gpus", type=non_negative_int, default=None, help="CUDA devices to offer (default: all)")
    n.add_argument(
        "--node-ip",
        default=None,
        help="IP to register, for gloo/NCCL and the rank-0 store "
        "(default $RAYNB_NODE_IP, else the interface that routes to the head)",
    )
    n.add_argument("--node-id", default=None, help="this node's name (default random)")
    n.add_argument(
        "--max-workers",
        type=positive_int,
        default=None,
        help="most workers this node may hold (default: the larger of 16 and 4 x its cores)",
    )
    n.add_argument(
        "--shared-storage",
        action="store_true",
        help="this host mounts the head's storage_path at the same path (else checkpoints stream)",
    )
    n.add_argument(
        "--reconnect",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds to keep registering again after losing the head (default 60)",
    )


def main(argv=None) -> int:
    """The ``raynb`` command; returns its exit status (2: a refused request or bad arguments).
    Output into a pipe whose reader has gone (``raynb status | head``) ends it quietly with
    141 (128 + SIGPIPE), as a command killed by SIGPIPE ends, not with a BrokenPipeError
    traceback."""
    try:
        code = _run(argv)
        sys.stdout.flush()  # a closed pipe shows here for output still buffered
        return code
    except BrokenPipeError:
        import os

        # Python flushes stdout again at exit: point it at /dev/null so that flush is silent.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141


def _run(argv=None) -> int:
    from .errors import ClusterError

    ap = build_parser()
    args = ap.parse_args(argv)
    if args.cmd is None:  # a bare `raynb`: what it can do, not "arguments are required: cmd"
        ap.print_help()
        return 0
    if args.cmd == "start" and (args.ray or args.ray_address):
        command = _cmd_start_on_ray
    else:
        command = COMMANDS[args.cmd]
    try:
        return command(args, ap) or 0
    except ClusterError as e:
        print(f"raynb: {e}", file=sys.stderr)
        return 2


def _cmd_start_on_ray(args, ap) -> int:
    from .cluster.launch.ray_engine import start_on_ray

    if args.preload:
        ap.error("--preload is for a local cluster, not --ray")

    try:
        info, started = start_on_ray(
            args.ray_address or "auto",
            workers_per_node=args.workers,
            max_workers_per_node=args.max_workers,
            port=args.port,
        )
    except ValueError as e:
        ap.error(str(e))
    print(
        f"raynb {'started' if started else 'already running'} on the Ray cluster at "
        f"{info['ray']['address']}: head at {info['address']}, {info['workers']} warm workers"
    )
    return 0


def _cmd_start(args, ap) -> int:
    from .cluster.connection_file import connection_file_path
    from .cluster.launch.local import join_command, start_and_keep
    from .cluster.node.zygote import preload_modules

    if args.preload is not None:
        try:
            preload_modules(args.preload)
        except ValueError as e:
            ap.error(f"--preload: {e}")
        os.environ["RAYNB_PRELOAD"] = args.preload  # the node agent's zygote reads it
    try:
        info, started = start_and_keep(
            4 if args.workers is None else args.workers,
            args.max_workers,
            host=args.host,
            port=args.port,
            idle_timeout_s=args.idle_timeout,
            key_file=args.key_file,
            head_only=args.head_only,
        )
    except ValueError as e:
        ap.error(str(e))
    print(
        f"raynb cluster {'started' if started else 'already running'} at {info['address']} "
        f"(head pid {info['pids']['head']}); connection file: {connection_file_path()}"
    )
    if args.preload and not started:
        print("--preload applies when a cluster starts: `raynb stop`, then start it again with --preload")
    join = join_command(info, connection_file_path())
    if join:
        print(f"CurveZMQ on; to join a host, copy the connection file there (mode 0600) and run:\n  {join}")
    return 0


def _cmd_keygen(args, ap) -> int:
    from .cluster.protocol.curve_auth import write_keys

    head, peers = write_keys(args.dir)
    print(
        f"{head}: for the head (`raynb start --key-file`) only, it holds the server's secret key\n"
        f"{peers}: for node agents and clients (`--key-file`, raynb.connect(addr, key_file=...))"
    )
    return 0


def _cmd_stop(args, ap) -> int:
    from .cluster.launch.local import stop_cluster

    print("raynb cluster stopped" if stop_cluster() else "no raynb cluster was running")
    return 0


def _cmd_node(args, ap) -> int:
    import logging
    import signal

    from .cluster.launch.static import run_node

    logging.basicConfig(level=logging.INFO, format="%(asctime)s node %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    return run_node(
        args.address,
        args.key_file,
        args.workers,
        args.gpus,
        args.node_ip,
        key=args.key,
        max_workers=args.max_workers,
        node_id=args.node_id,
        shared_storage=args.shared_storage,
        reconnect_s=args.reconnect,
    )


def _cmd_jobs(args, ap) -> int:
    try:
        return _job_command(args)
    except ValueError as e:
        print(f"raynb: {e}", file=sys.stderr)
        return 2


def _cmd_run(args, ap) -> int:
    from .compat.run_script import run_script

    return run_script(args.script, args.args)


def _cmd_demo(args, ap) -> int:
    from .demo import run_demo

    return run_demo(args.workers, args.epochs)


def _status() -> int:
    """``raynb status``: at once, even while a start is under way (it holds the start lock
    until its workers are ready): what the head has so far, or that it is starting."""
    from .cluster.launch.local import running_cluster, starting_pid
    from .cluster.protocol.control import Client

    info = running_cluster(wait=False)
    pid = starting_pid()
    starting = f"a raynb cluster is starting (pid {pid})" if pid else None
    if info is None:
        if starting:
            print(f"{starting}; its head is not up yet: `raynb status` again in a moment")
            return 0
        print("no raynb cluster is running (start one with `raynb start`)")
        return 1
    if starting:
        print(f"{starting}; its workers are not all ready yet. So far:")
    c = Client(info["address"], info["key"].encode(), info)
    try:
        print(format_status(c.status()))
    finally:
        c.close()
    return 0


def add_job_commands(sub) -> None:
    """``raynb submit`` and ``raynb jobs list|logs|stop`` (client/jobs.py)."""
    j = sub.add_parser(
        "submit",
        help="run a driver command on the cluster's head node (a job "
        "that outlives this client), streaming its output",
    )
    j.add_argument(
        "--address",
        default=None,
        help="a connection file or tcp://HOST:PORT (with "
        "$RAYNB_KEY); default: this machine's cluster (local or on Ray)",
    )
    j.add_argument(
        "--working-dir",
        default=None,
        metavar="DIR",
        help="packed, sent and unpacked into the job's own directory, its cwd (at most 100 MiB)",
    )
    j.add_argument("--job-id", default=None)
    j.add_argument("--no-wait", action="store_true", help="print the job id and return")
    j.add_argument("entrypoint", nargs=argparse.REMAINDER, help="-- the command, e.g. -- python train.py")
    jobs = sub.add_parser("jobs", help="list the cluster's jobs, show a job's logs, stop one")
    jobs.add_argument("--address", default=None, help="as for submit")
    jsub = jobs.add_subparsers(dest="jobs_cmd", metavar="list|logs|stop", required=True)
    jsub.add_parser("list", help="every job: id, state, command")
    lg = jsub.add_parser("logs", help="a job's output")
    lg.add_argument("job_id")
    lg.add_argument("--follow", "-f", action="store_true", help="until the job ends")
    st = jsub.add_parser("stop", help="SIGTERM the job (SIGKILL after 3 s)")
    st.add_argument("job_id")


def _job_client(address):
    from .client.connection import connect, disconnect
    from .cluster.launch.local import running_cluster
    from .cluster.protocol.control import Client
    from .errors import ClusterError

    if address is None:
        info = running_cluster()
        if info is None:
            raise ClusterError(
                "no raynb cluster is running here (start one with `raynb start`, or pass --address)"
            )
        return Client(info["address"], info["key"].encode(), info)
    client = connect(address)
    info = client.info
    disconnect()
    return Client(info["address"], info["key"].encode(), info)


def _driver_status(jobs_client, client, job_id: str, state: str) -> int:
    """The exit status ``raynb submit`` ends with: the driver's own (128 + N when signal N
    ended it), as a shell gives; 1 when the head kept none."""
    code = next((j.get("returncode") for j in jobs_client.list_jobs(client) if j["job_id"] == job_id), None)
    if isinstance(code, int):
        return min(code, 255) if code >= 0 else 128 + min(-code, 127)
    return 0 if state == "SUCCEEDED" else 1


def _job_command(args) -> int:
    from .client import jobs as jobs_client

    if args.cmd == "submit":
        entry = args.entrypoint[1:] if args.entrypoint[:1] == ["--"] else args.entrypoint
        if not entry:
            raise ValueError("raynb submit needs a command after --, e.g. raynb submit -- python train.py")
        jobs_client.check_submit(entry, None, args.job_id)  # a bad command or id: refused before connecting
        archive_dir = args.working_dir
        if archive_dir is not None:
            jobs_client.pack_working_dir(archive_dir)  # over the limit: refused before connecting
        client = _job_client(args.address)
        try:
            job = jobs_client.submit_job(client, entry, working_dir=archive_dir, job_id=args.job_id)
            print(
                f"raynb: job {job['job_id']} submitted (pid {job['pid']}); `raynb jobs logs "
                f"{job['job_id']} --follow` shows its output, `raynb jobs stop {job['job_id']}` ends it",
                file=sys.stderr,
                flush=True,
            )
            if args.no_wait:
                print(job["job_id"])
                return 0
            try:
                state = jobs_client.job_logs(
                    client,
                    job["job_id"],
                    follow=True,
                    write=lambda t: (sys.stdout.write(t), sys.stdout.flush()),
                )
            except KeyboardInterrupt:
                print(f"\nraynb: job {job['job_id']} keeps running", file=sys.stderr)
                return 130
            print(f"raynb: job {job['job_id']} {state}", file=sys.stderr)
            return _driver_status(jobs_client, client, job["job_id"], state)
        finally:
            client.close()
    client = _job_client(args.address)
    try:
        if args.jobs_cmd == "list":
            for job in jobs_client.list_jobs(client):
                print(f"{job['job_id']:<18} {job['state']:<10} {' '.join(job['entrypoint'])}")
        elif args.jobs_cmd == "logs":
            state = jobs_client.job_logs(
                client,
                args.job_id,
                follow=args.follow,
                write=lambda t: (sys.stdout.write(t), sys.stdout.flush()),
            )
            if args.follow:
                print(f"raynb: job {args.job_id} {state}", file=sys.stderr)
        else:
            job = jobs_client.stop_job(client, args.job_id)
            print(f"raynb: job {job['job_id']} {job['state']}")
    finally:
        client.close()
    return 0


# Each subcommand's function: (parsed args, the parser for its usage errors) -> exit status.
COMMANDS = {
    "start": _cmd_start,
    "keygen": _cmd_keygen,
    "status": lambda args, ap: _status(),
    "stop": _cmd_stop,
    "node": _cmd_node,
    "submit": _cmd_jobs,
    "jobs": _cmd_jobs,
    "run": _cmd_run,
    "demo": _cmd_demo,
}


if __name__ == "__main__":
    sys.exit(main())
