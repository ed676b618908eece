"""Elastic resize times: how long an elastic run (``num_workers=(2, 4)``) takes to grow when
a node joins and to shrink when one is lost. Prints one JSON object.

On a private cluster (its own temporary ``RAYNB_HOME`` and storage) whose local node holds
2 workers, one elastic run trains epochs of ``--epoch-ms`` ms, a checkpoint each, until
told to stop. ``--cycles`` times, this process:

- **grow**: starts a second node agent ``n2`` (``raynb node``, 2 workers, as on another
  host) and waits until the head lists its 2 workers (polled every 20 ms); timed from
  then (the host has joined, its workers are warm) to the first report at 4 ranks (the report's own time, in
  ``result.json``). It includes the wait for the run's next resize check
  (``elastic_resize_monitor_interval_s``, ``--interval``), the stop at the next
  checkpoint, the new process group and the checkpoint's load, and one epoch.
- **shrink**: SIGKILLs n2's node agent and its workers (its whole process group, as a host
  that dies); timed from the kill to the first report at 2 ranks.

Medians and the spread of each, with the machine and its load. The cluster and every node
agent started are always stopped, whatever happened.

With ``--ray``, the same on Ray Train v2 (``RAY_TRAIN_V2_ENABLED=1``, Ray 2.60's elastic
``TorchTrainer``, ``num_workers=(2, 4)``), once each, in a child process: a Ray cluster of
2-CPU raylets on this machine (``ray.cluster_utils.Cluster``, which starts and ends its own
processes by pid), one more raylet added (timed from ``add_node`` returning to the first
report at 4 ranks) and removed without grace (to the first report at 2). Ray's elastic
policy waits for ready resources and starts a new worker group (new actor processes that
import torch) at each resize.

Usage::

    python -m benchmarks.elastic            # 5 grows and 5 shrinks
    python -m benchmarks.elastic --quick    # smoke test: 1 of each
    python -m benchmarks.elastic --ray      # and Ray Train v2's resize beside it (minutes)
    python -m benchmarks.elastic --on-ray   # and raynb on Ray: a Ray node added / removed
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

from benchmarks.rerun_latency import machine_info, private_cluster  # noqa: E402


def epochs_fn(config):
    """Epochs of ``epoch_s`` s (an all_reduce each), a checkpoint each from rank 0, resumed
    from ``get_checkpoint()``; ends when the file ``stop`` exists (agreed on by all ranks)."""
    import json as _json
    import os as _os
    import tempfile as _tempfile
    import time as _time

    import torch
    import torch.distributed as dist

    from raynb.train import Checkpoint, get_checkpoint, get_context, report

    rank = get_context().get_world_rank()
    start = 0
    ck = get_checkpoint()
    if ck is not None:
        with ck.as_directory() as d, open(_os.path.join(d, "s.json")) as f:
            start = _json.load(f)["epoch"] + 1
    for epoch in range(start, 1_000_000):
        t = torch.tensor([float(_os.path.exists(config["stop"]))])
        dist.all_reduce(t)
        if t.item() > 0:
            return
        _time.sleep(config["epoch_s"])
        with _tempfile.TemporaryDirectory() as d:
            if rank == 0:
                with open(_os.path.join(d, "s.json"), "w") as f:
                    _json.dump({"epoch": epoch}, f)
            report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(d) if rank == 0 else None)


def _rows(run_dir: str) -> list[dict]:
    try:
        with open(os.path.join(run_dir, "result.json")) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    rows = []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            break  # a line being written
    return rows


def _first_report_at(run_dir: str, world: int, since: float, timeout: float = 180.0) -> float:
    """Seconds from ``since`` (wall clock) to the first report at ``world`` ranks made after it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in _rows(run_dir):
            if r.get("world_size") == world and r["timestamp"] >= since:
                return r["timestamp"] - since
        time.sleep(0.02)
    raise TimeoutError(f"no report at {world} ranks within {timeout:.0f}s")


def _start_node(node_id: str) -> subprocess.Popen:
    from raynb.cluster.connection_file import connection_file_path, read_connection_file

    info = read_connection_file()
    return subprocess.Popen(
        [sys.executable, "-m", "raynb.cli", "node", "--address", info["address"], "--key-file",
         str(connection_file_path()), "--workers", "2", "--max-workers", "2", "--node-id", node_id,
         "--shared-storage"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: killed whole, as a host that dies
    )  # fmt: skip


def _wait_ready(client, node_id: str, n: int, timeout: float = 300.0) -> None:
    """Until ``n`` workers of ``node_id`` are up (idle, or already taken by the run)."""
    deadline = time.monotonic() + timeout
    while True:
        up = [w for w in client.status()["workers"] if w.get("node_id") == node_id]
        if len(up) >= n:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"node {node_id}: {len(up)} of {n} workers up")
        time.sleep(0.02)


def _wait_gone(client, node_id: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while any(n["node_id"] == node_id for n in client.status()["nodes"]) and time.monotonic() < deadline:
        time.sleep(0.1)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL a node agent's process group, and remove the workers' temp dir that it, so
    killed, cannot remove itself."""
    import shutil
    import tempfile

    from raynb.cluster.node.host import WORKERS_TMP_PREFIX

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        if name.startswith(f"{WORKERS_TMP_PREFIX}{proc.pid}-"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _control_client():
    """A connection to the head of this thread's own (the run's client is another thread's)."""
    from raynb.cluster.connection_file import read_connection_file
    from raynb.cluster.protocol.control import Client

    conn = read_connection_file()
    return Client(conn["address"], conn["key"].encode(), conn)


def _cycles(args, client, run_dir: str, started: list) -> dict:
    grow, shrink = [], []
    for i in range(args.cycles):
        node = _start_node(f"n{i + 2}")
        started.append(node)
        _wait_ready(client, f"n{i + 2}", 2)
        grow.append(_first_report_at(run_dir, 4, time.time()))
        time.sleep(3 * args.epoch_ms / 1000)  # a few epochs at 4
        killed_at = time.time()
        _kill_group(node)
        shrink.append(_first_report_at(run_dir, 2, killed_at))
        _wait_gone(client, f"n{i + 2}")  # its loss seen: the next cycle's node is a new one
    return {"grow_s": grow, "shrink_s": shrink}


def _summary(xs: list) -> dict:
    return {
        "median": round(statistics.median(xs), 3),
        "min": round(min(xs), 3),
        "max": round(max(xs), 3),
        "n": len(xs),
    }


def _ray_child(log: str) -> None:
    """(``--ray-child LOG``, a process of its own) Ray Train v2's grow and shrink: prints JSON."""
    os.environ["RAY_TRAIN_V2_ENABLED"] = "1"
    import tempfile

    import ray
    from ray.cluster_utils import Cluster

    stop = log + ".stop"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    storage = tempfile.mkdtemp(prefix="raynb-bench-ray-")
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        from ray.train import FailureConfig, RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer

        trainer = TorchTrainer(
            _ray_fn,
            train_loop_config={"stop": stop, "log": log},
            scaling_config=ScalingConfig(num_workers=(2, 4), elastic_resize_monitor_interval_s=0.5),
            run_config=RunConfig(
                storage_path=storage, name="ray-elastic", failure_config=FailureConfig(max_failures=-1)
            ),
        )
        fit = threading.Thread(target=trainer.fit, daemon=True)
        fit.start()
        _first_line_at(log, 2, 0.0)
        node = cluster.add_node(num_cpus=2)
        grow = _first_line_at(log, 4, time.time())
        time.sleep(1.0)
        removed_at = time.time()
        cluster.remove_node(node, allow_graceful=False)
        shrink = _first_line_at(log, 2, removed_at)
        open(stop, "w").close()
        fit.join(120)
        print(json.dumps({"grow_s": round(grow, 3), "shrink_s": round(shrink, 3), "ray": ray.__version__}))
    finally:
        ray.shutdown()
        cluster.shutdown()
        import shutil

        shutil.rmtree(storage, ignore_errors=True)


def _ray_fn(config):
    """Ray's side of :func:`epochs_fn`: rank 0 logs each report's time and world size."""
    import json as _json
    import os as _os
    import tempfile as _tempfile
    import time as _time

    import ray.train as rt
    import torch
    import torch.distributed as dist

    ctx = rt.get_context()
    start = 0
    ck = rt.get_checkpoint()
    if ck is not None:
        with ck.as_directory() as d, open(_os.path.join(d, "s.json")) as f:
            start = _json.load(f)["epoch"] + 1
    for epoch in range(start, 1_000_000):
        t = torch.tensor([float(_os.path.exists(config["stop"]))])
        dist.all_reduce(t)
        if t.item() > 0:
            return
        _time.sleep(0.2)
        with _tempfile.TemporaryDirectory() as d:
            if ctx.get_world_rank() == 0:
                with open(_os.path.join(d, "s.json"), "w") as f:
                    _json.dump({"epoch": epoch}, f)
                with open(config["log"], "a") as f:
                    f.write(_json.dumps({"t": _time.time(), "world": ctx.get_world_size()}) + "\n")
            ck = rt.Checkpoint.from_directory(d) if ctx.get_world_rank() == 0 else None
            rt.report({"epoch": epoch}, checkpoint=ck)


def _first_line_at(log: str, world: int, since: float, timeout: float = 600.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(log):
            with open(log) as f:
                for line in f.read().splitlines():
                    try:
                        r = json.loads(line)
                    except ValueError:
                        break
                    if r["world"] == world and r["t"] >= since:
                        return r["t"] - since
        time.sleep(0.05)
    raise TimeoutError(f"Ray: no report at {world} ranks within {timeout:.0f}s")


def _ray_resize() -> dict:
    """Ray Train v2's grow and shrink, measured by a child process (``_ray_child``)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="raynb-bench-raylog-") as d:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.elastic", "--ray-child", os.path.join(d, "log.jsonl")],
            cwd=os.path.dirname(
                os.path.dirname(os.path.abspath(__file__))
            ),  # where `benchmarks` imports from
            capture_output=True,
            text=True,
            timeout=900,
        )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr or proc.stdout)[-2000:]}
    return json.loads(lines[-1])


def _on_ray(args) -> dict:
    from benchmarks.elastic_on_ray import on_ray

    times = on_ray(args.cycles, args.epoch_ms / 1000, args.interval)
    return {
        "grow_s": _summary(times["grow_s"]),
        "workers_up_s": _summary(times["workers_up_s"]),
        "shrink_s": _summary(times["shrink_s"]),
        "samples": {k: times[k] for k in ("grow_s", "workers_up_s", "shrink_s")},
        "run_state": times["run_state"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 grow and 1 shrink")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--epoch-ms", type=float, default=200.0)
    ap.add_argument("--interval", type=float, default=0.5, help="elastic_resize_monitor_interval_s")
    ap.add_argument("--ray", action="store_true", help="Ray Train v2's resize too (minutes)")
    ap.add_argument("--ray-child", help=argparse.SUPPRESS)
    ap.add_argument(
        "--on-ray", action="store_true", help="raynb on Ray's resize too (benchmarks/elastic_on_ray.py)"
    )
    args = ap.parse_args(argv)
    if args.ray_child:
        _ray_child(args.ray_child)
        return 0
    if args.quick:
        args.cycles = 1
    load = os.getloadavg()[0]
    import raynb
    from raynb.train import FailureConfig, RunConfig, ScalingConfig
    from raynb.train.torch import TorchTrainer

    started: list[subprocess.Popen] = []
    with private_cluster() as (home, storage):
        from raynb.cluster.launch import start_cluster

        start_cluster(num_workers=2, max_workers=2)
        raynb.connect()
        client = _control_client()
        stop = os.path.join(storage, "stop")
        run_dir = os.path.join(storage, "elastic-bench")
        out: dict = {}
        trainer = TorchTrainer(
            epochs_fn,
            train_loop_config={"epoch_s": args.epoch_ms / 1000, "stop": stop},
            scaling_config=ScalingConfig(num_workers=(2, 4), elastic_resize_monitor_interval_s=args.interval),
            run_config=RunConfig(
                name="elastic-bench", verbose=0, failure_config=FailureConfig(max_failures=-1)
            ),
        )
        fit = threading.Thread(target=lambda: out.setdefault("result", trainer.fit()), daemon=True)
        fit.start()
        try:
            _first_report_at(run_dir, 2, 0.0)
            times = _cycles(args, client, run_dir, started)
        finally:
            open(stop, "w").close()
            fit.join(120)
            for node in started:
                _kill_group(node)
            client.close()
            raynb.disconnect()
        result = out.get("result")
    ray_side = _ray_resize() if args.ray else {"skipped": "not asked (--ray)"}
    on_ray = _on_ray(args) if args.on_ray else {"skipped": "not asked (--on-ray)"}
    print(
        json.dumps(
            {
                "grow_s": _summary(times["grow_s"]),
                "shrink_s": _summary(times["shrink_s"]),
                "samples": times,
                "run_state": getattr(result, "state", None),
                "settings": {"cycles": args.cycles, "epoch_ms": args.epoch_ms, "interval_s": args.interval},
                "ray_train_v2": ray_side,
                "raynb_on_ray": on_ray,
                "machine": machine_info(load),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
