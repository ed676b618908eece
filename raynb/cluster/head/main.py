"""``python -m raynb.cluster.head``: a head in the foreground or as a daemon, with
the local node agent, announced through the connection file."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import time

from ..connection_file import raynb_home, remove_connection_file, write_connection_file
from ..protocol import curve_auth as curve
from ..protocol import messages
from ..storage.made_ahead import spare_files
from .pool import IDLE_TIMEOUT_ENV, idle_timeout_s
from .server import Head

log = logging.getLogger("raynb.head")


def _parser() -> argparse.ArgumentParser:
    """The head process's command line."""
    ap = argparse.ArgumentParser(prog="python -m raynb.cluster.head")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--max-workers", type=int, default=None)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--daemon", action="store_true", help="fork into the background first")
    ap.add_argument("--token", default="", help="written into the connection file for the starter")
    ap.add_argument(
        "--key-file",
        default=None,
        help="keys made by `raynb keygen` (head-keys.json): the "
        "same keys across restarts, so node agents reconnect to a restarted head",
    )
    ap.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        help=f"seconds an extra worker may stay idle (default ${IDLE_TIMEOUT_ENV}, else 60)",
    )
    return ap


def _publish(head: Head, key: bytes, workers: int, token: str) -> None:
    """Write the connection file clients and `raynb stop` read: address, key, pids."""
    head.connection_info = {
        "address": head.address,
        "key": key.decode(),
        "workers": workers,
        "pids": {"head": os.getpid(), "node": head.local_node.pid if head.local_node else None},
        "created": time.time(),
        "version": messages.PROTOCOL_VERSION,
        "token": token,
    }
    if head.curve_keys:  # the server's public key and the client keypair; never its secret
        head.connection_info["curve"] = curve.client_part(head.curve_keys)
    write_connection_file(head.connection_info)


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    try:
        idle_timeout = idle_timeout_s(args.idle_timeout)
    except ValueError as e:
        ap.error(str(e))
    if args.daemon and os.fork() > 0:
        os._exit(0)  # the launcher exits; the head is adopted by init and outlives its starter
    logging.basicConfig(level=logging.INFO, format="%(asctime)s head %(levelname)s %(message)s")
    key, curve_keys = messages.key_from_env() if not args.key_file else b"", None
    if args.key_file:
        seed = curve.read_head_keys(args.key_file)
        key, curve_keys = seed["key"].encode(), seed["curve"]
        os.environ["RAYNB_KEY"] = key.decode()  # the local node agent's
    head = Head(
        key,
        args.host,
        args.port,
        args.workers,
        args.max_workers,
        idle_timeout,
        curve_keys=curve_keys if curve.needed(args.host) else None,
    )
    stop = lambda *_: setattr(head, "_stop", True)  # noqa: E731
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def node_started(pid: int) -> None:
        # A restarted local node agent has a new pid: `raynb stop` must find it.
        if head.connection_info is not None:
            head.connection_info["pids"]["node"] = pid
            write_connection_file(head.connection_info)

    if args.workers > 0:  # --workers 0: a head alone, its workers on the nodes that join
        head.start_local_node(node_started)
    _publish(head, key, args.workers, args.token)
    log.info("head listening on %s", head.address)
    spare_files.install(raynb_home() / "spare")  # run directories made ahead, where files are cheap
    try:
        head.serve()
    finally:
        remove_connection_file()
        head.jobs.stop_all()  # a job's driver ends with its cluster (as a Ray job's does)
        head.close()
        spare_files.uninstall()
    return 0
