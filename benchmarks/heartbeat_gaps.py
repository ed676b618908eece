"""The longest silence of a busy, alive node agent as the head sees it: the margin a
shorter ``RAYNB_NODE_TIMEOUT_S`` would eat into. Prints one JSON object.

A private cluster with a 2-worker local node and a second node agent ``n2`` (``raynb node``,
2 workers, as on another host: judged by its heartbeats). A 4-rank run trains CPU-bound
epochs (matrix products, an all_reduce and a report each) for ``--seconds``, beside
``--burners`` CPU-bound processes of this benchmark's own (a loaded machine). Meanwhile
this process polls the head's status every 50 ms and records n2's ``last_heartbeat_s`` (the
time since the head last heard from it): its largest value is the longest silence of an
alive, busy node; the heartbeat interval asked of it is 1 s.

Usage: ``python -m benchmarks.heartbeat_gaps [--seconds 60] [--burners 4]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time

from benchmarks.elastic import _control_client, _kill_group, _start_node, _wait_ready
from benchmarks.rerun_latency import machine_info, private_cluster


def busy_fn(config):
    """CPU-bound epochs until the file ``stop`` exists (agreed on by all ranks)."""
    import os as _os

    import torch
    import torch.distributed as dist

    from raynb.train import report

    a = torch.randn(256, 256)
    epoch = 0
    while True:
        t = torch.tensor([float(_os.path.exists(config["stop"]))])
        dist.all_reduce(t)
        if t.item() > 0:
            return
        for _ in range(20):
            a = torch.tanh(a @ a)
        report({"epoch": epoch})
        epoch += 1


def _burn(until: float) -> None:
    x = 0
    while time.time() < until:
        x += 1


def _poll(client, seconds: float) -> tuple[list[float], int]:
    """n2's ``last_heartbeat_s`` every 50 ms for ``seconds``, and how many polls found no n2
    (it was held lost: a false loss, as it is alive)."""
    seen, missing, end = [], 0, time.monotonic() + seconds
    while time.monotonic() < end:
        got = [n["last_heartbeat_s"] for n in client.status()["nodes"] if n["node_id"] == "n2"]
        seen += got
        missing += not got
        time.sleep(0.05)
    return seen, missing


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--burners", type=int, default=4, help="CPU-bound processes beside the run")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    import raynb
    from raynb.train import RunConfig, ScalingConfig
    from raynb.train.torch import TorchTrainer

    with private_cluster() as (home, storage):
        from raynb.cluster.launch import start_cluster

        start_cluster(num_workers=2, max_workers=2)
        raynb.connect()
        client = _control_client()
        node = _start_node("n2")
        burners: list = []
        try:
            _wait_ready(client, "n2", 2)
            stop = os.path.join(storage, "stop")
            trainer = TorchTrainer(
                busy_fn,
                train_loop_config={"stop": stop},
                scaling_config=ScalingConfig(num_workers=4),
                run_config=RunConfig(name="busy", verbose=0),
            )
            fit = threading.Thread(target=trainer.fit, daemon=True)
            fit.start()
            until = time.time() + args.seconds + 5
            burners = [multiprocessing.Process(target=_burn, args=(until,)) for _ in range(args.burners)]
            for b in burners:
                b.start()
            time.sleep(5)  # the run placed, n2 busy
            seen, missing = _poll(client, args.seconds)
            open(stop, "w").close()
            fit.join(60)
        finally:
            for b in burners:
                b.join(30)
            _kill_group(node)
            client.close()
            raynb.disconnect()
    seen.sort()
    print(
        json.dumps(
            {
                "n2_silence_s": {
                    "max": max(seen),
                    "p99": seen[int(0.99 * (len(seen) - 1))],
                    "median": statistics.median(seen),
                    "polls": len(seen),
                    "polls_without_n2": missing,
                },
                "settings": {"seconds": args.seconds, "burners": args.burners},
                "machine": machine_info(load),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
