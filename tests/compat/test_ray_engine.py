"""raynb on a real multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``:
a head raylet and several worker raylets), shared by the tests of this module in order:
start (agents per node, resources held), runs across nodes, a node joining, an agent
actor killed, a node killed mid-run, stop (resources back, nothing left).

Skipped, with the reason, where Ray is not installed (``pip install "raynb[ray]"``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import cloudpickle
import psutil
import pytest

ray = pytest.importorskip("ray", reason='Ray is not installed: pip install "raynb[ray]"')

from conftest import alive  # noqa: E402
from ray_support import ray_cluster, raynb_pids  # noqa: E402

import raynb  # noqa: E402
import raynb.client.connection  # noqa: E402
from raynb.client.status import format_status  # noqa: E402
from raynb.cluster.launch import ray_engine  # noqa: E402
from raynb.errors import ClusterError  # noqa: E402
from raynb.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from raynb.train.torch import TorchTrainer  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])
assert Checkpoint  # used inside the shipped functions


@pytest.fixture(scope="module")
def rayc(raynb_home, tmp_path_factory):
    """The Ray cluster: a head node with 1 CPU that a Ray actor holds before raynb starts
    (so its agent gets 0 of the 1 CPU asked), and two worker nodes with 2 CPUs each.
    Yields a dict: cluster, nodes, ray resources before raynb started, info."""
    home = tmp_path_factory.mktemp("ray_home")
    old = os.environ["RAYNB_HOME"]
    os.environ["RAYNB_HOME"] = str(home)
    # The session's connection (tests/conftest.py's cluster) is set aside, not closed:
    # the tests after these go on using it.
    session_client, raynb.client.connection._client = raynb.client.connection._client, None
    try:
        with ray_cluster(head_cpus=1, node_cpus=(2, 2)) as (cluster, nodes):
            head_id = cluster.head_node.node_id

            @ray.remote(num_cpus=1)
            class Holder:
                def ready(self):
                    return True

            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            holder = Holder.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(head_id, soft=False)
            ).remote()
            ray.get(holder.ready.remote())
            before = ray.available_resources()
            state = {
                "cluster": cluster,
                "nodes": list(nodes),
                "before": before,
                "holder": holder,
                "head_id": head_id,
                "pids": set(),
            }
            t = time.monotonic()
            info, started = ray_engine.start_on_ray(cluster.address, workers_per_node=None)
            state.update(info=info, start_s=time.monotonic() - t)
            assert started
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
        raynb.client.connection.disconnect()  # this module's own, if a test left one open
        raynb.client.connection._client = session_client
        os.environ["RAYNB_HOME"] = old


def status() -> dict:
    return raynb.cluster_status()


def wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:.0f}s")
        time.sleep(0.2)


def _allreduce(config):
    import os

    import torch
    import torch.distributed as dist

    from raynb.train import get_context, report

    rank = get_context().get_world_rank()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(
        everyone,
        {
            "rank": rank,
            "node": os.environ.get("RAYNB_NODE_ID"),
            "sum": t.item(),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
        },
    )
    report({"sum": t.item(), "ranks": everyone})


def _fit(fn, n: int, **run):
    return TorchTrainer(
        fn, scaling_config=ScalingConfig(num_workers=n), run_config=RunConfig(verbose=0, **run)
    ).fit()


def test_start_places_one_agent_per_ray_node_holding_its_cpus(rayc):
    cluster, nodes = rayc["cluster"], rayc["nodes"]
    agents = ray_engine.ray_info(cluster.address)["agents"]
    # Every Ray node with CPUs has an agent, pinned there (the actor says where it runs).
    assert set(agents) == {rayc["head_id"]} | {n.node_id for n in nodes}
    for nid, a in agents.items():
        assert a["on_ray_node"] == nid
    assert {nid: a["workers"] for nid, a in agents.items()} == {
        rayc["head_id"]: 0,
        nodes[0].node_id: 2,
        nodes[1].node_id: 2,
    }
    # The head node had its CPU taken: the agent took what was free and says so.
    st = status()
    by_ray = {n["labels"]["ray_node_id"]: n for n in st["nodes"]}
    assert set(by_ray) == set(agents)
    assert "Ray had 0 CPUs" in by_ray[rayc["head_id"]]["note"]
    text = format_status(st)
    for nid in agents:
        assert f"ray node id {nid}" in text
    assert len(st["workers"]) == 4
    # A second start finds it; connect(ray_address=) attaches to the same head; the CLI shows it.
    again, started = ray_engine.start_on_ray(cluster.address)
    assert not started and again["address"] == rayc["info"]["address"]
    raynb.disconnect()
    assert raynb.connect(ray_address=cluster.address).info["address"] == again["address"]
    cli = subprocess.run(
        [sys.executable, "-m", "raynb.cli", "status"], capture_output=True, text=True, timeout=60
    )
    assert cli.returncode == 0 and all(f"ray node id {nid}" in cli.stdout for nid in agents), (
        cli.stdout + cli.stderr
    )
    assert "Ray had 0 CPUs" in cli.stdout
    # Ray's CPUs are held: nothing is free, and a Ray task that asks for one waits.
    assert ray.available_resources().get("CPU", 0) == 0
    rayc["pids"] |= raynb_pids()


def _rank_niceness():
    import os

    from raynb.train import report

    report({"nice": os.nice(0)})


def test_raynb_runs_at_niceness_0_where_ray_starts_its_workers_at_15(rayc):
    """Ray starts actor processes at niceness 15 (RAY_worker_niceness); raynb's head, agents,
    zygotes and ranks ask for 0, or beside nice-0 work on a node they starve (under three
    CPU-bound processes on 2 cores the zygotes took over 3 minutes to start)."""

    @ray.remote(num_cpus=0)
    def plain_ray_task():
        return os.nice(0)

    assert ray.get(plain_ray_task.remote()) == 15  # Ray's default, the one raynb must not inherit
    pids = raynb_pids()
    rayc["pids"] |= pids
    assert len(pids) >= 3 + 3 + 4 + 1  # agents, zygotes, workers and the head at least
    assert {pid: psutil.Process(pid).nice() for pid in pids} == dict.fromkeys(pids, 0)
    result = _fit(_rank_niceness, 4)
    assert result.state == "FINISHED", result.error
    assert result.metrics["nice"] == 0


def test_four_ranks_across_two_ray_nodes_all_reduce(rayc):
    result = _fit(_allreduce, 4)
    assert result.error is None, result.error
    assert result.metrics["sum"] == 10.0
    ranks = result.metrics["ranks"]
    assert [r["sum"] for r in ranks] == [10.0] * 4
    nodes = [r["node"] for r in ranks]
    assert len(set(nodes)) == 2 and all(nodes.count(n) == 2 for n in set(nodes)), nodes
    assert all(r["cuda"] == "" for r in ranks), "Ray gave no GPU: the ranks see none"


def _read_shard(config):
    import torch

    from raynb.train import get_context, get_dataset_shard, report

    shard = get_dataset_shard("train")
    ids = []
    for batch in shard.iter_torch_batches(batch_size=7):
        assert isinstance(batch["id"], torch.Tensor)
        ids += batch["id"].tolist()
    import torch.distributed as dist

    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(
        everyone,
        {
            "rank": get_context().get_world_rank(),
            "ids": ids,
            "count": shard.count(),
            "cuda_initialized": torch.cuda.is_initialized(),
        },
    )
    report({"ranks": everyone})


def test_a_ray_dataset_feeds_two_ranks_disjoint_complete_rows(rayc, tmp_path):
    ds = ray.data.from_items([{"id": i} for i in range(100)])  # blocks in the object store: no CPU needed
    storage = tmp_path / "results"
    result = TorchTrainer(
        _read_shard,
        datasets={"train": ds},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(verbose=0, storage_path=f"file://{storage}"),
    ).fit()
    assert result.error is None, result.error
    rows = result.metrics["ranks"]
    by_rank = {r["rank"]: r["ids"] for r in rows}
    assert set(by_rank) == {0, 1}
    assert len(by_rank[0]) == len(by_rank[1]) == 50 == rows[0]["count"]
    assert not set(by_rank[0]) & set(by_rank[1])
    assert sorted(by_rank[0] + by_rank[1]) == list(range(100))
    assert not any(r["cuda_initialized"] for r in rows)
    assert not os.listdir(storage / ".ray_data"), "the per-rank split files were left"
    assert os.path.dirname(result.path) == str(storage)  # a pyarrow.fs file:// URI is that directory


def test_ray_node_added_later_gets_an_agent_and_is_used(rayc):
    # With 2 GPUs as Ray counts them (this machine has none: the CPU-visible part of the
    # GPU plumbing is what is checked: the GPUs Ray gave the agent, and what ranks see).
    new = rayc["cluster"].add_node(num_cpus=2, num_gpus=2)
    rayc["nodes"].append(new)
    t = time.monotonic()
    wait_for(lambda: len(status()["workers"]) == 6, 60, "the new Ray node's workers did not come up")
    joined_s = time.monotonic() - t
    node = next(n for n in status()["nodes"] if n["labels"]["ray_node_id"] == new.node_id)
    assert node["gpus"] == [0, 1] and node["labels"]["ray_gpu_ids"] == "0,1"
    assert ray.available_resources().get("GPU", 0) == 0, "the agent holds the node's GPUs"
    result = _fit(_allreduce, 6)
    assert result.error is None, result.error
    assert result.metrics["sum"] == 21.0
    on_new = [r for r in result.metrics["ranks"] if r["node"] == node["node_id"]]
    assert len(on_new) == 2
    assert all(r["cuda"] == "0,1" for r in on_new), "ranks see exactly the GPUs Ray gave their agent"
    assert all(r["cuda"] == "" for r in result.metrics["ranks"] if r not in on_new)
    rayc["joined_s"] = joined_s
    rayc["pids"] |= raynb_pids()


def test_ray_kill_of_an_agent_actor_leaves_no_worker_and_it_is_replaced(rayc):
    victim = rayc["nodes"][0].node_id
    st = status()
    node = next(n for n in st["nodes"] if n["labels"]["ray_node_id"] == victim)
    pids = {node["pid"], node["zygote_pid"]} | {
        w["pid"] for w in st["workers"] if w["node_id"] == node["node_id"]
    }
    assert len(pids) == 4
    agent = ray.get_actor(f"raynb-node-{victim[:16]}", namespace="raynb")
    ray.kill(agent, no_restart=True)
    wait_for(lambda: not alive(pids), 15, f"the killed agent's processes {alive(pids)} were left")
    # The watcher sees the agent gone and places a new one on the (living) Ray node.
    wait_for(
        lambda: (
            sum(w["node_id"] == node["node_id"] for w in status()["workers"]) == 2
            and not ({w["pid"] for w in status()["workers"]} & pids)
        ),
        60,
        "no new agent",
    )
    rayc["pids"] |= raynb_pids()


def _epochs(config):
    import json
    import os
    import tempfile
    import time

    import torch
    import torch.distributed as dist

    from raynb.train import Checkpoint, get_checkpoint, get_context, report

    state = {"epoch": -1}
    ck = get_checkpoint()
    if ck is not None:
        with ck.as_directory() as d, open(os.path.join(d, "state.json")) as f:
            state = json.load(f)
    start = state["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        t = torch.ones(1)
        dist.all_reduce(t)
        time.sleep(config["sleep"])
        ckpt = None
        if get_context().get_world_rank() == 0:
            d = tempfile.mkdtemp()
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"epoch": epoch}, f)
            ckpt = Checkpoint.from_directory(d)
        report(
            {"epoch": epoch, "start": start, "world": t.item(), "node": os.environ.get("RAYNB_NODE_ID")},
            checkpoint=ckpt,
        )
        if get_context().get_world_rank() == 0 and epoch == 1:
            open(config["flag"], "w").close()


def test_ray_node_killed_mid_run_restarts_from_checkpoint_on_the_others(rayc, tmp_path):
    flag = str(tmp_path / "epoch1")
    by_node = {n.node_id: n for n in rayc["nodes"]}
    killed = {}

    def kill_a_node_with_ranks():
        wait_for(lambda: os.path.exists(flag), 120, "the run never reached epoch 1")
        st = status()
        busy = {w["node_id"] for w in st["workers"] if w["run"]}
        newest = rayc["nodes"][-1].node_id  # the GPU node stays (the stop test counts its GPUs)
        node = next(n for n in st["nodes"] if n["node_id"] in busy and n["labels"]["ray_node_id"] != newest)
        killed["node_id"] = node["node_id"]
        rayc["cluster"].remove_node(by_node[node["labels"]["ray_node_id"]], allow_graceful=False)
        rayc["nodes"].remove(by_node[node["labels"]["ray_node_id"]])

    killer = threading.Thread(target=kill_a_node_with_ranks, daemon=True)
    killer.start()
    result = TorchTrainer(
        _epochs,
        train_loop_config={"epochs": 6, "sleep": 0.4, "flag": flag},
        scaling_config=ScalingConfig(num_workers=4),
        run_config=RunConfig(verbose=0, failure_config=FailureConfig(max_failures=2)),
    ).fit()
    killer.join(5)
    assert result.error is None, result.error
    assert killed, "no node was killed"
    df = result.metrics_dataframe
    assert result.metrics["epoch"] == 5 and result.metrics["world"] == 4.0
    # The second attempt started after a checkpointed epoch (>= 1), on the other nodes only.
    assert result.metrics["start"] >= 2, result.metrics
    assert set(df["epoch"]) == set(range(6))
    rows = [json.loads(line) for line in open(os.path.join(result.path, "result.json"))]
    assert killed["node_id"] not in {r.get("node") for r in rows if r.get("start", 0) >= 2}
    st = status()
    assert killed["node_id"] not in {n["node_id"] for n in st["nodes"]}


def test_stop_gives_ray_its_resources_back_and_leaves_nothing(rayc):
    cluster = rayc["cluster"]

    @ray.remote(num_cpus=1)
    def one_cpu():
        return os.getpid()

    waiting = one_cpu.remote()
    ready, _ = ray.wait([waiting], timeout=2.0)
    assert not ready, "a Ray task got a CPU that raynb's agents hold"
    pids = rayc["pids"] | raynb_pids()
    ray_procs = [p for p in psutil.Process().children(recursive=True) if p.name() in ("raylet", "gcs_server")]
    cli = subprocess.run(
        [sys.executable, "-m", "raynb.cli", "stop"], capture_output=True, text=True, timeout=120
    )
    assert cli.returncode == 0 and "raynb cluster stopped" in cli.stdout, cli.stdout + cli.stderr
    assert ray.get(waiting, timeout=30)  # the CPUs came back to Ray
    wait_for(lambda: not alive(pids), 15, f"raynb processes {alive(pids)} were left")
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == "raynb"]
    assert names == []
    before = {k: v for k, v in rayc["before"].items() if not k.startswith("node:")}
    # The CPUs of the node killed before are gone with it; every other one is back.
    expected = dict(
        before, CPU=before["CPU"] - 2 + 2, GPU=2.0
    )  # a 2-CPU node killed, a 2-CPU 2-GPU one added
    wait_for(
        lambda: (
            {k: v for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
            == {k: v for k, v in expected.items() if k in ("CPU", "GPU")}
        ),
        15,
        f"Ray's resources are {ray.available_resources()}, not {expected}",
    )
    assert all(p.is_running() for p in ray_procs), "raynb stop must leave Ray's processes alone"
    assert ray_engine.stop_on_ray(rayc["info"]) is False  # nothing of raynb is left to stop
    raynb.disconnect()
    with pytest.raises(ClusterError, match="no raynb cluster is running"):
        raynb.cluster_status()  # the connection file went with it
    rayc["pids"] = pids
    assert cluster.head_node is not None
