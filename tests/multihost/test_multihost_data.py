"""Datasets and large captured arrays across hosts: the head, two node agents and a
notebook client, each in a network namespace of its own (``multihost_fixture``), the
links CurveZMQ-encrypted. The notebook's script runs with a ``/dev/shm`` of its own, as
on another machine: it cannot write the nodes' shared memory, so every byte goes to each
node agent's data socket (``cluster.data_server``). The node hosts share the machine's
``/dev/shm``; their segments are told apart by the node ids in their names
(``cluster.shm``), which carry this process's pid (helpers run in parallel). Skipped
where namespaces cannot be made (not root)."""

from __future__ import annotations

import json
import os
import time

import pytest
from support.multihost_fixture import cluster_up

from raynb.cluster.node import shm

NODES = (f"xd{os.getpid()}a", f"xd{os.getpid()}b")
ROWS = 131072  # x: ROWS x 64 float32 = 32 MiB, plus int64 labels (1 MiB)
CAPTURED = 6 << 20  # float32 elements: 24 MiB, above the 16 MiB threshold


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    with cluster_up(tmp_path_factory.mktemp("multihost-data"), tag="d", node_ids=NODES) as c:
        yield c
    left = {n: shm.segments(n) for n in NODES}
    assert not any(left.values()), f"segments left after the cluster stopped: {left}"


def _wait_no_segments(timeout: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout
    while any(shm.segments(n) for n in NODES) and time.monotonic() < deadline:
        time.sleep(0.1)
    return {n: shm.segments(n) for n in NODES if shm.segments(n)}


DATASET_RUN = (
    """
    import numpy as np
    import torch
    import torch.distributed as dist
    from raynb import ScalingConfig, TorchTrainer, RunConfig
    from raynb.cluster.node import shm
    from raynb.train import get_context, get_dataset_shard, report

    ROWS = %d
    x = np.random.default_rng(0).random((ROWS, 64), dtype=np.float32)
    x[:, 0] = np.arange(ROWS)                  # row i's first feature is i: content checked
    ds = raynb.data.from_numpy({"x": x, "y": np.arange(ROWS, dtype=np.int64)})

    def loop():
        ctx = get_context()
        shard = get_dataset_shard("train")
        ys, ok, t0 = [], True, time.monotonic()
        for b in shard.iter_torch_batches(batch_size=4096):
            ys.append(b["y"].numpy())
            ok &= bool(torch.equal(b["x"][:, 0].long(), b["y"]))
        dist.barrier()                         # every rank has read its shard: count now
        node = os.environ["RAYNB_NODE_ID"]
        me = {"rank": ctx.get_world_rank(), "node": node, "ip": os.environ.get("RAYNB_NODE_IP"),
              "len": len(shard), "content_ok": ok, "read_s": time.monotonic() - t0,
              "segments": shm.segments(node)}
        everyone, ids = [None] * 4, [None] * 4
        dist.all_gather_object(everyone, me)
        dist.all_gather_object(ids, np.concatenate(ys))
        rows = [len(i) for i in ids]
        union = np.unique(np.concatenate(ids))
        overlap = sum(len(np.intersect1d(ids[i], ids[j])) for i in range(4) for j in range(i + 1, 4))
        report({"ranks": json.dumps(everyone), "rows": json.dumps(rows), "union": int(len(union)),
                "union_min": int(union[0]), "union_max": int(union[-1]), "overlap": int(overlap)})

    raynb.connect(KEY_FILE)
    t0 = time.monotonic()
    r = TorchTrainer(loop, datasets={"train": ds}, run_config=RunConfig(verbose=0),
                     scaling_config=ScalingConfig(num_workers=4, placement_strategy="SPREAD")).fit()
    m = r.metrics
    print(json.dumps({"ranks": json.loads(m["ranks"]), "rows": json.loads(m["rows"]), "union": m["union"],
                      "union_min": m["union_min"], "union_max": m["union_max"], "overlap": m["overlap"],
                      "size_bytes": ds.size_bytes(), "fit_s": time.monotonic() - t0,
                      "client_shm": shm.segments()}))
"""
    % ROWS
)


def test_dataset_sharded_over_two_hosts_one_copy_each_via_data_sockets(hosts):
    out, r = hosts.client(DATASET_RUN, timeout=120, private_shm=True)
    ranks = sorted(out["ranks"], key=lambda x: x["rank"])
    per = ROWS // 4
    assert out["rows"] == [per] * 4 and [x["len"] for x in ranks] == [per] * 4  # equal counts
    assert out["overlap"] == 0  # disjoint
    assert (out["union"], out["union_min"], out["union_max"]) == (ROWS, 0, ROWS - 1)  # all rows
    assert all(x["content_ok"] for x in ranks)
    by_node: dict[str, list] = {}
    for x in ranks:
        by_node.setdefault(x["node"], []).append(x)
    assert sorted(by_node) == sorted(NODES) and all(len(v) == 2 for v in by_node.values())  # SPREAD
    assert {x["ip"] for x in ranks} == {"198.18.0.2", "198.18.0.3"}
    for node, xs in by_node.items():
        # one copy per host: one segment of this node, the dataset's size, seen alike by both ranks
        segs = xs[0]["segments"]
        assert len(segs) == 1 and all(x["segments"] == segs for x in xs), (node, [x["segments"] for x in xs])
        [name] = segs
        assert name.startswith(f"raynb-{node}-")
        assert out["size_bytes"] <= segs[name] < out["size_bytes"] + 4096, (segs, out["size_bytes"])
    assert out["client_shm"] == {}  # nothing in the notebook's own /dev/shm
    assert _wait_no_segments() == {}  # freed on both hosts after the run


CAPTURED_RUN = (
    """
    import numpy as np
    import torch.distributed as dist
    from raynb import ScalingConfig, TorchTrainer, RunConfig
    from raynb.cluster.node import shm
    from raynb.train import get_context, report

    big = np.random.default_rng(1).random(%d, dtype=np.float32)

    def loop():
        ctx = get_context()
        base = big
        while isinstance(base, np.ndarray):
            base = base.base
        base = base.obj if isinstance(base, memoryview) else base
        node = os.environ["RAYNB_NODE_ID"]
        part = np.array_split(big, 4)[ctx.get_world_rank()]
        me = {"rank": ctx.get_world_rank(), "node": node, "n": int(big.size),
              "sum": float(part.sum(dtype=np.float64)), "head": big[:3].tolist(),
              "mapped": type(base).__name__ == "mmap", "segments": shm.segments(node)}
        dist.barrier()
        everyone = [None] * 4
        dist.all_gather_object(everyone, me)
        report({"ranks": json.dumps(everyone)})

    raynb.connect(KEY_FILE)
    r = TorchTrainer(loop, run_config=RunConfig(verbose=0),
                     scaling_config=ScalingConfig(num_workers=4, placement_strategy="SPREAD")).fit()
    print(json.dumps({"ranks": json.loads(r.metrics["ranks"]), "nbytes": big.nbytes, "head": big[:3].tolist(),
                      "sums": [float(p.sum(dtype=np.float64)) for p in np.array_split(big, 4)],
                      "client_shm": shm.segments()}))
"""
    % CAPTURED
)


def test_large_captured_array_read_on_both_hosts_freed_after(hosts):
    out, r = hosts.client(CAPTURED_RUN, timeout=120, private_shm=True)
    ranks = sorted(out["ranks"], key=lambda x: x["rank"])
    assert [x["sum"] for x in ranks] == out["sums"]  # every rank read the right bytes
    assert all(x["n"] == CAPTURED and x["head"] == out["head"] for x in ranks)
    assert all(x["mapped"] for x in ranks)  # a view of the node's segment
    assert sorted({x["node"] for x in ranks}) == sorted(NODES)
    for node in NODES:
        segs = [x["segments"] for x in ranks if x["node"] == node]
        assert len(segs) == 2 and segs[0] == segs[1] and len(segs[0]) == 1, segs
        [size] = segs[0].values()
        assert out["nbytes"] <= size < out["nbytes"] + 4096
    assert out["client_shm"] == {}
    assert _wait_no_segments() == {}


IDLE_NODE_RUN = """
    import numpy as np
    import torch.distributed as dist
    from raynb import ScalingConfig, TorchTrainer, RunConfig
    from raynb.cluster.node import shm
    from raynb.train import get_dataset_shard, report

    ds = raynb.data.from_numpy({"x": np.zeros((%d, 64), dtype=np.float32)})
    NODES = %r

    def loop():
        len(get_dataset_shard("train"))
        dist.barrier()
        me = {"node": os.environ["RAYNB_NODE_ID"], "held": {n: len(shm.segments(n)) for n in NODES}}
        everyone = [None] * 2
        dist.all_gather_object(everyone, me)
        report({"ranks": json.dumps(everyone)})

    raynb.connect(KEY_FILE)
    r = TorchTrainer(loop, datasets={"train": ds}, run_config=RunConfig(verbose=0),
                     scaling_config=ScalingConfig(num_workers=2, placement_strategy="PACK")).fit()
    print(json.dumps({"ranks": json.loads(r.metrics["ranks"])}))
""" % (ROWS, NODES)


def test_dataset_goes_only_to_the_nodes_that_run_ranks(hosts):
    out, r = hosts.client(IDLE_NODE_RUN, timeout=120, private_shm=True)
    [node] = {x["node"] for x in out["ranks"]}  # PACK: both ranks on one host
    [idle] = set(NODES) - {node}
    held = out["ranks"][0]["held"]
    assert _wait_no_segments() == {}
    assert held[node] == 1 and held[idle] == 0, held


SLEEPS_OR_DIES = (
    """
    import signal
    import numpy as np
    from raynb import ScalingConfig, TorchTrainer, RunConfig
    from raynb.train import get_context, get_dataset_shard

    ds = raynb.data.from_numpy({"x": np.zeros((%d, 64), dtype=np.float32)})

    def loop():
        next(iter(get_dataset_shard("train").iter_batches(batch_size=64)))
        if DIE and get_context().get_world_rank() == 3:
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)

    raynb.connect(KEY_FILE)
    try:
        TorchTrainer(loop, datasets={"train": ds}, run_config=RunConfig(verbose=0),
                     scaling_config=ScalingConfig(num_workers=4, placement_strategy="SPREAD")).fit()
        print(json.dumps({"outcome": "finished"}))
    except KeyboardInterrupt:
        print(json.dumps({"outcome": "cancelled"}))
    except raynb.RunError as e:
        print(json.dumps({"outcome": "failed", "error": str(e)[:300]}))
"""
    % ROWS
)


def test_segments_freed_on_both_hosts_after_cancel_and_worker_death(hosts):
    import signal
    import subprocess

    c = hosts
    # cancelled: Ctrl-C in the notebook once both hosts hold the data
    p = c.net.popen(
        "client",
        c.client_args("    DIE = False" + SLEEPS_OR_DIES, private_shm=True),
        env=c.env("client"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not all(shm.segments(n) for n in NODES) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        held = {n: sum(shm.segments(n).values()) for n in NODES}
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert all(b >= ROWS * 64 * 4 for b in held.values()), (held, stderr[-2000:])
    assert '"outcome": "cancelled"' in stdout, stdout + stderr[-2000:]
    assert _wait_no_segments() == {}
    c.wait_workers(4)
    # a rank on the second host is killed: the run fails, both hosts' segments go
    out, r = c.client("    DIE = True" + SLEEPS_OR_DIES, timeout=120, private_shm=True)
    assert out["outcome"] == "failed" and "rank 3" in out["error"], r.stdout
    assert _wait_no_segments() == {}
    c.wait_workers(4)


LOSES_ITS_HOST = """
    import numpy as np
    import torch
    import torch.distributed as dist
    from raynb import FailureConfig, RunConfig, ScalingConfig, TorchTrainer
    from raynb.cluster.node import shm
    from raynb.train import get_context, get_dataset_shard, report

    x = np.zeros((%d, 64), dtype=np.float32)
    x[:, 0] = np.arange(len(x))
    ds = raynb.data.from_numpy({"x": x, "y": np.arange(len(x), dtype=np.int64)})
    NODES, MARK = %r, %r

    def loop():
        shard = get_dataset_shard("train")
        ok = all(bool(torch.equal(b["x"][:, 0].long(), b["y"])) for b in shard.iter_torch_batches(batch_size=8192))
        node = os.environ["RAYNB_NODE_ID"]
        dist.barrier()
        first = not os.path.exists(MARK)
        dist.barrier()
        if first:                           # the first attempt waits for its host to be killed
            if get_context().get_world_rank() == 0:
                with open(MARK + ".tmp", "w") as f:
                    f.write(node)
                os.rename(MARK + ".tmp", MARK)
            time.sleep(120)
        report({"node": node, "rows": len(shard), "content_ok": ok,
                "held": json.dumps({n: len(shm.segments(n)) for n in NODES})})

    raynb.connect(KEY_FILE)
    r = TorchTrainer(loop, datasets={"train": ds}, run_config=RunConfig(verbose=0,
                     failure_config=FailureConfig(max_failures=1)),
                     scaling_config=ScalingConfig(num_workers=2, placement_strategy="PACK")).fit()
    m = r.metrics
    print(json.dumps({"error": None if r.error is None else str(r.error)[:500], "node": m.get("node"),
                      "rows": m.get("rows"), "content_ok": m.get("content_ok"), "held": m.get("held")}))
"""


def test_a_restart_after_losing_its_host_gets_the_data_on_the_new_node(hosts):
    """Issue 11's host loss with in-memory data: the first attempt's host holds the only
    copy and dies; the restart lands on the other node, which had none (data only goes to
    the nodes that run ranks): the head asks the notebook for it there, and the run ends well."""
    import subprocess

    c = hosts
    mark = c.storage / "lost-host-mark"
    code = LOSES_ITS_HOST % (ROWS, NODES, str(mark))
    p = c.net.popen(
        "client",
        c.client_args(code, private_shm=True),
        env=c.env("client"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    host = first = None
    try:
        deadline = time.monotonic() + 90
        while not mark.exists():
            assert time.monotonic() < deadline and p.poll() is None, p.communicate()
            time.sleep(0.05)
        first = mark.read_text()
        [other] = set(NODES) - {first}
        assert shm.segments(first) and not shm.segments(other)  # one copy, where the ranks run
        host = "h1" if first == NODES[0] else "h2"
        assert c.net.kill_all(host) and not c.net.wait_empty(host)  # the host dies
        stdout, stderr = p.communicate(timeout=120)
        lines = [x for x in stdout.splitlines() if x.startswith("{")]
        assert lines, stdout + stderr[-3000:]
        out = json.loads(lines[-1])
        assert out["error"] is None, stdout + stderr[-3000:]
        assert out["node"] == other and out["rows"] == ROWS // 2 and out["content_ok"], out
        assert json.loads(out["held"])[other] == 1, out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if host is not None:
            c.start_node(host, first)  # the host comes back: its new agent removes the dead one's copy
    c.wait_workers(4)
    assert _wait_no_segments(30) == {}
