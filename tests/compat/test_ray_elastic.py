"""An elastic run on raynb on Ray: a Ray node added to the cluster (as Ray's autoscaler
adds one) is room to grow, and a Ray node removed shrinks the run at once.

One Ray cluster for the module (``ray.cluster_utils.Cluster``, its processes started and
ended by pid): a head raylet with no CPU (no raynb agent) and one 2-CPU worker raylet.
raynb starts on it as ``raynb start --ray`` does (``ray_engine.start_on_ray``): one node
agent with 2 workers. A ``(2, 4)`` run starts at 2 ranks; a second 2-CPU raylet is added
(``add_node``): the head actor's watcher places a node agent there, its workers come up,
and the run grows to 4 at a checkpoint; the raylet is removed without grace
(``remove_node``): the watcher tells the head, which restarts the run at 2 from the latest
checkpoint. Every epoch is trained once past its checkpoint.

Skipped, with the reason, where Ray is not installed (``pip install "raynb[ray]"``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import cloudpickle
import pytest

ray = pytest.importorskip("ray", reason='Ray is not installed: pip install "raynb[ray]"')

from conftest import alive  # noqa: E402
from ray_support import ray_cluster, raynb_pids  # noqa: E402

import raynb  # noqa: E402
import raynb.client.connection  # noqa: E402
from raynb.cluster.launch import ray_engine  # noqa: E402
from raynb.train import FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from raynb.train.torch import TorchTrainer  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def rayc(raynb_home, tmp_path_factory):
    """raynb on a Ray cluster of one 2-CPU worker raylet. Yields {cluster, info, pids}."""
    home = tmp_path_factory.mktemp("ray_home")
    old = os.environ["RAYNB_HOME"]
    os.environ["RAYNB_HOME"] = str(home)
    # The session's connection (tests/conftest.py's cluster) is set aside, not closed.
    session_client, raynb.client.connection._client = raynb.client.connection._client, None
    try:
        with ray_cluster(head_cpus=0, node_cpus=(2,)) as (cluster, _nodes):
            info, started = ray_engine.start_on_ray(cluster.address, workers_per_node=None)
            assert started
            state = {"cluster": cluster, "info": info, "pids": set()}
            try:
                yield state
            finally:
                raynb.client.connection.disconnect()
                ray_engine.stop_on_ray(info)
                state["pids"] |= raynb_pids()
                deadline = time.monotonic() + 10
                while alive(state["pids"]) and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert not alive(state["pids"]), f"raynb processes left: {alive(state['pids'])}"
    finally:
        raynb.client.connection.disconnect()
        raynb.client.connection._client = session_client
        os.environ["RAYNB_HOME"] = old


def _epochs_until_stopped(config):
    """Epochs of ``epoch_s`` s (an all_reduce each), a checkpoint each from rank 0, resumed
    from ``get_checkpoint()``; ends when the file ``stop`` exists (agreed on by all ranks)."""
    import json
    import os
    import tempfile
    import time

    import torch
    import torch.distributed as dist

    from raynb.train import Checkpoint, get_checkpoint, get_context, report

    rank = get_context().get_world_rank()
    start = 0
    ck = get_checkpoint()
    if ck is not None:
        with ck.as_directory() as d, open(os.path.join(d, "s.json")) as f:
            start = json.load(f)["epoch"] + 1
    for epoch in range(start, 100_000):
        t = torch.tensor([float(os.path.exists(config["stop"]))])
        dist.all_reduce(t)
        if t.item() > 0:
            return
        time.sleep(config["epoch_s"])
        with tempfile.TemporaryDirectory() as d:
            if rank == 0:
                with open(os.path.join(d, "s.json"), "w") as f:
                    json.dump({"epoch": epoch}, f)
            ckpt = Checkpoint.from_directory(d) if rank == 0 else None
            report({"epoch": epoch, "start": start, "node": os.environ.get("RAYNB_NODE_ID")}, checkpoint=ckpt)


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


def _first_report_at(run_dir: str, world: int, since: float, timeout: float, fit) -> float:
    """Seconds from ``since`` (wall clock) to the first report at ``world`` ranks after it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in _rows(run_dir):
            if r.get("world_size") == world and r["timestamp"] >= since:
                return r["timestamp"] - since
        assert fit.is_alive(), "the run ended early"
        time.sleep(0.05)
    raise AssertionError(f"no report at {world} ranks within {timeout:.0f}s: {_rows(run_dir)[-3:]}")


def test_ray_node_added_grows_the_run_and_removed_shrinks_it(rayc, tmp_path):
    cluster = rayc["cluster"]
    stop, run_dir = str(tmp_path / "stop"), str(tmp_path / "results" / "on-ray")
    out: dict = {}
    trainer = TorchTrainer(
        _epochs_until_stopped,
        train_loop_config={"epoch_s": 0.2, "stop": stop},
        scaling_config=ScalingConfig(num_workers=(2, 4), elastic_resize_monitor_interval_s=0.5),
        run_config=RunConfig(
            name="on-ray",
            storage_path=str(tmp_path / "results"),
            verbose=0,
            failure_config=FailureConfig(max_failures=1),
        ),
    )
    fit = threading.Thread(target=lambda: out.setdefault("result", trainer.fit()), daemon=True)
    fit.start()
    try:
        _first_report_at(run_dir, 2, 0.0, 120, fit)
        node = cluster.add_node(num_cpus=2)
        grow_s = _first_report_at(run_dir, 4, time.time(), 180, fit)
        _first_report_at(run_dir, 4, time.time() + 0.5, 30, fit)  # a few epochs at 4
        rayc["pids"] |= raynb_pids()
        at4_nodes = {w["node_id"] for w in raynb.cluster_status()["workers"] if w["run"]}
        removed_at = time.time()
        cluster.remove_node(node, allow_graceful=False)
        shrink_s = _first_report_at(run_dir, 2, removed_at, 60, fit)
        _first_report_at(run_dir, 2, time.time() + 0.5, 30, fit)
    finally:
        open(stop, "w").close()
        fit.join(120)
    result = out["result"]
    assert result.error is None, result.error
    assert len(result.failures) == 1, result.failures  # the Ray node's loss; the grow is none
    rows = _rows(run_dir)
    sizes = [r["world_size"] for r in rows]
    assert [s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s] == [2, 4, 2], sizes
    # Each attempt resumed from the latest checkpoint (its ``start``) and trained every
    # epoch from there once; the grow stopped at a committed checkpoint: nothing redone.
    attempts: dict[int, list] = {}
    for r in rows:
        attempts.setdefault(r["start"], []).append(r["epoch"])
    assert all(e == list(range(s, s + len(e))) for s, e in attempts.items()), attempts
    assert sorted({r["epoch"] for r in rows}) == list(range(rows[-1]["epoch"] + 1)), attempts
    first4 = sizes.index(4)
    assert rows[first4]["start"] == rows[first4 - 1]["epoch"] + 1, rows
    # The 4-rank attempt used both Ray nodes' agents; the new one is gone from raynb.
    assert len(at4_nodes) == 2, at4_nodes
    assert not any(n["labels"].get("ray_node_id") == node.node_id for n in raynb.cluster_status()["nodes"])
    print(f"\nraynb on Ray: add_node -> first report at 4: {grow_s:.2f} s; "
          f"remove_node -> first report at 2: {shrink_s:.2f} s")  # fmt: skip
