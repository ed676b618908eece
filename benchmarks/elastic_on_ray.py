"""Elastic resize times of raynb on Ray (``raynb start --ray``): a Ray node added to the
cluster (as Ray's autoscaler adds one) is room to grow, a Ray node removed is a loss.
Run by ``python -m benchmarks.elastic --on-ray`` (its ``on_ray`` section).

A Ray cluster on this machine (``ray.cluster_utils.Cluster``, which starts and ends its own
processes by pid; never ``ray stop``): a head raylet with no CPU (so no raynb agent) and one
2-CPU raylet; raynb starts on it (``ray_engine.start_on_ray``: one node agent with 2
workers). One elastic run (``num_workers=(2, 4)``, :func:`benchmarks.elastic.epochs_fn`);
``cycles`` times, a 2-CPU raylet is added (timed from ``add_node`` returning to the first
report at 4 ranks: Ray starts the raylet, the head actor's watcher places a node agent
there, its zygote imports torch and forks 2 workers (``workers_up_s``: to raynb listing
them), the run's next resize check, the stop at a checkpoint, the new group and one epoch) and removed without grace (timed from
``remove_node`` returning to the first report at 2: Ray marks the node dead, the watcher
tells the head, the run restarts on the warm workers left).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time


def _ray_cluster(tmp: str):
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "include_dashboard": False, "temp_dir": os.path.join(tmp, "ray")},
    )
    cluster.add_node(num_cpus=2)
    return cluster


def _gone_from_raynb(ray_node_id: str, timeout: float = 60.0) -> None:
    import raynb

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = raynb.cluster_status()["nodes"]
        if not any(n["labels"].get("ray_node_id") == ray_node_id for n in nodes):
            return
        time.sleep(0.1)


def _workers_up(ray_node_id: str, since: float, timeout: float = 300.0) -> float:
    """Seconds from ``since`` (wall clock) until raynb lists 2 workers on the Ray node."""
    import raynb

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = raynb.cluster_status()
        ours = {n["node_id"] for n in st["nodes"] if n["labels"].get("ray_node_id") == ray_node_id}
        if sum(w["node_id"] in ours for w in st["workers"]) >= 2:
            return time.time() - since
        time.sleep(0.05)
    raise TimeoutError(f"no raynb workers on Ray node {ray_node_id} within {timeout:.0f}s")


def _cycles(cluster, run_dir: str, cycles: int, epoch_s: float) -> dict:
    from benchmarks.elastic import _first_report_at

    grow, up, shrink = [], [], []
    for _ in range(cycles):
        node = cluster.add_node(num_cpus=2)
        added_at = time.time()
        up.append(_workers_up(node.node_id, added_at))
        grow.append(_first_report_at(run_dir, 4, added_at, timeout=300))
        time.sleep(3 * epoch_s)  # a few epochs at 4
        removed_at = time.time()
        cluster.remove_node(node, allow_graceful=False)
        shrink.append(_first_report_at(run_dir, 2, removed_at))
        _gone_from_raynb(node.node_id)  # its loss seen: the next cycle's node is a new one
    return {"grow_s": grow, "workers_up_s": up, "shrink_s": shrink}


def _trainer(stop: str, storage: str, epoch_s: float, interval: float):
    from benchmarks.elastic import epochs_fn
    from raynb.train import FailureConfig, RunConfig, ScalingConfig
    from raynb.train.torch import TorchTrainer

    return TorchTrainer(
        epochs_fn,
        train_loop_config={"epoch_s": epoch_s, "stop": stop},
        scaling_config=ScalingConfig(num_workers=(2, 4), elastic_resize_monitor_interval_s=interval),
        run_config=RunConfig(
            name="elastic-on-ray",
            storage_path=storage,
            verbose=0,
            failure_config=FailureConfig(max_failures=-1),
        ),
    )


def on_ray(cycles: int, epoch_s: float, interval: float) -> dict:
    """Grow and shrink times (lists of seconds) of raynb on a Ray cluster on this machine."""
    import cloudpickle
    import psutil
    import ray

    import benchmarks.elastic
    import raynb
    from raynb.cluster.launch import ray_engine

    cloudpickle.register_pickle_by_value(benchmarks.elastic)  # the ranks cannot import it
    tmp = tempfile.mkdtemp(prefix="rre.")  # short: Ray's socket paths must stay < 108 bytes
    old = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "RAYNB_HOME")}
    os.environ.update(RAY_TMPDIR=tmp, RAYNB_HOME=os.path.join(tmp, "home"))
    cluster, info, ours, out = None, None, set(), {}
    stop, run_dir = os.path.join(tmp, "stop"), os.path.join(tmp, "results", "elastic-on-ray")
    try:
        cluster = _ray_cluster(tmp)
        ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
        cluster.wait_for_nodes()
        info, _ = ray_engine.start_on_ray(cluster.address, workers_per_node=None)
        trainer = _trainer(stop, os.path.join(tmp, "results"), epoch_s, interval)
        fit = threading.Thread(target=lambda: out.setdefault("result", trainer.fit()), daemon=True)
        fit.start()
        try:
            from benchmarks.elastic import _first_report_at

            _first_report_at(run_dir, 2, 0.0)
            times = _cycles(cluster, run_dir, cycles, epoch_s)
        finally:
            open(stop, "w").close()
            fit.join(120)
        result = out.get("result")
        return dict(times, run_state=getattr(result, "state", None))
    finally:
        ours = {p.pid for p in psutil.Process().children(recursive=True)}
        raynb.disconnect()
        if info is not None:
            ray_engine.stop_on_ray(info)
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        _end(ours)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(tmp, ignore_errors=True)


def _end(pids: set[int]) -> None:
    """Wait for the processes this benchmark started to end; kill (by pid) what is left."""
    import psutil

    deadline = time.monotonic() + 15
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.Error:
            pass
    _, left = psutil.wait_procs(procs, timeout=max(0.0, deadline - time.monotonic()))
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            pass
