"""raynb.data on real clusters: shards, shuffles, one shared copy per node, streaming.

Shared memory is counted in the real ``/dev/shm`` (only this cluster's node agent's
segments: other clusters on the machine have their own names).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
from conftest import ok_cell, private_cluster, wait_idle_workers

import raynb.data as rd
from raynb.cluster.node import shm
from raynb.errors import RunError
from raynb.train import RunConfig, ScalingConfig, get_context, get_dataset_shard, report
from raynb.train.torch import TorchTrainer

QUIET = RunConfig(verbose=0)
N = 1003  # rows: not a multiple of 4, so padding shows


def _agent(client) -> tuple[str, int]:
    [node] = client.status()["nodes"]
    return node["node_id"], node["pid"]


def _segments(client) -> dict:
    return shm.segments(*_agent(client))


def _wait_no_segments(client, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while _segments(client) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _segments(client), f"segments left in /dev/shm: {_segments(client)}"


def _ids_per_epoch():
    """Each rank: its row ids in epochs 0 and 1, and what the node's /dev/shm holds."""
    import raynb.train as rt

    shard = rt.get_dataset_shard("train")
    epochs = [
        np.concatenate([b["id"] for b in shard.iter_batches(batch_size=100)]).tolist() for _ in range(2)
    ]
    b = next(iter(shard.iter_torch_batches(batch_size=8, prefetch_batches=0)))
    x = next(iter(shard.iter_batches(batch_size=8, prefetch_batches=0)))["x"]
    base = x
    while isinstance(base, np.ndarray):
        base = base.base
    base = base.obj if isinstance(base, memoryview) else base
    return {
        "epochs": epochs,
        "len": len(shard),
        "count": shard.count(),
        "tensor_dtype": str(b["x"].dtype),
        "x_view_of_mmap": type(base).__name__ == "mmap",
        "x_writeable": bool(x.flags.writeable),
        "segments": sorted(shm.segments(os.environ["RAYNB_NODE_ID"]).values()),
    }


def _every_rank(fn):
    """The function's value on every rank (rank 0 returns them all)."""
    import torch.distributed as dist

    def run():
        mine = fn()
        out = [None] * get_context().get_world_size()
        dist.all_gather_object(out, mine)
        return out

    return run


def test_shards_disjoint_equal_one_copy_per_node_freed_after(warm):
    x = np.random.default_rng(0).random((N, 64), dtype=np.float32)
    ds = rd.from_numpy({"x": x, "id": np.arange(N)})
    trainer = TorchTrainer(
        _every_rank(_ids_per_epoch),
        datasets={"train": ds},
        scaling_config=ScalingConfig(num_workers=4),
        run_config=QUIET,
    )
    from raynb.train.datasets import with_datasets
    from raynb.train.fit_run import execute_run

    _, ranks = execute_run(
        with_datasets(trainer.train_loop_per_worker, trainer.datasets), None, trainer.scaling_config, QUIET
    )
    per = -(-N // 4)
    for epoch in range(2):
        rows = [r["epochs"][epoch] for r in ranks]
        assert [len(r) for r in rows] == [per] * 4
        flat = sum(rows, [])
        assert set(flat) == set(range(N))  # every row, padded by wrapping
        assert len(flat) - len(set(flat)) == 4 * per - N
        assert rows[:3] == [list(range(i * per, (i + 1) * per)) for i in range(3)]  # unshuffled: in order
    assert all(r["len"] == r["count"] == per for r in ranks)
    assert all(r["x_view_of_mmap"] and not r["x_writeable"] for r in ranks)  # views, no copy
    assert {r["tensor_dtype"] for r in ranks} == {"torch.float32"}
    # one copy on the node: a single segment the size of the columns, mapped by all 4 ranks
    sizes = {tuple(r["segments"]) for r in ranks}
    assert len(sizes) == 1 and len(ranks[0]["segments"]) == 1
    assert ds.size_bytes() <= ranks[0]["segments"][0] < ds.size_bytes() + 4096
    _wait_no_segments(warm)


def _shuffled_ids():
    import raynb.train as rt

    shard = rt.get_dataset_shard("train")
    out = []
    for epoch in (0, 1, 0):
        shard.set_epoch(epoch)
        out.append(np.concatenate([b["id"] for b in shard.iter_batches(batch_size=64)]).tolist())
    return out


def test_global_shuffle_moves_rows_between_ranks_reproducibly(warm):
    ds = rd.from_numpy({"id": np.arange(400)}).random_shuffle(seed=7)
    from raynb.train.datasets import with_datasets
    from raynb.train.fit_run import execute_run

    runs = [
        execute_run(
            with_datasets(_every_rank(_shuffled_ids), {"train": ds}),
            None,
            ScalingConfig(num_workers=4),
            QUIET,
        )[1]
        for _ in range(2)
    ]
    a, b = runs
    assert a == b  # same seed: the same orders, run after run
    e0 = [set(r[0]) for r in a]
    e1 = [set(r[1]) for r in a]
    assert set().union(*e0) == set(range(400)) and sum(map(len, e0)) == 400  # disjoint, complete
    assert set().union(*e1) == set(range(400)) and sum(map(len, e1)) == 400
    assert all(len(e0[r] - e1[r]) > 50 for r in range(4))  # rows moved to other ranks
    assert [r[0] for r in a] == [r[2] for r in a]  # set_epoch(0) again: epoch 0's shards
    assert a[0][0] != list(range(100))  # and shuffled within
    _wait_no_segments(warm)


def test_2gib_captured_array_goes_through_shared_memory_head_flat(warm):
    import psutil

    head = psutil.Process(warm.status()["pid"])
    node_pid_before = _agent(warm)[1]
    rss0 = head.memory_info().rss
    big = np.ones((1 << 29,), dtype=np.float32)  # 2 GiB, read by the function as a notebook's would be

    def big_captured_sum():
        return float(big[:: 1 << 20].sum()), big.shape, bool(big.flags.writeable)  # noqa: F821 - bound above, deleted after the run

    seen: list = []
    stop = threading.Event()

    agent = _agent(warm)

    def watch():  # while it runs: the segment's bytes, and the head's RSS (no socket: not thread-safe)
        while not stop.is_set():
            seen.append((sum(shm.segments(*agent).values()), head.memory_info().rss))
            time.sleep(0.02)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        from raynb.train.fit_run import execute_run

        result, value = execute_run(_every_rank(big_captured_sum), None, ScalingConfig(num_workers=2), QUIET)
    finally:
        stop.set()
        t.join()
        del big
    assert [v[0] for v in value] == [float(1 << 9)] * 2
    assert all(v[1] == (1 << 29,) and v[2] for v in value)  # copy-on-write: writeable as before
    assert max(s for s, _ in seen) == 1 << 31  # one copy on the node, never two
    assert max(r for _, r in seen) - rss0 < 64 << 20  # nothing through the head
    assert _agent(warm)[1] == node_pid_before  # no node lost (heartbeats went on)
    assert not result.failures
    _wait_no_segments(warm)


def _map_and_fail():
    import raynb.train as rt

    shard = rt.get_dataset_shard("train")
    got = [b["double"].tolist() for b in shard.iter_batches(batch_size=5, prefetch_batches=2)]
    report({"got": sum(got, [])})
    for _ in rt.get_dataset_shard("bad").iter_torch_batches(batch_size=3):
        pass


def test_map_batches_runs_on_ranks_and_its_error_names_the_batch(warm):
    ds = rd.from_numpy({"v": np.arange(20)}).map_batches(lambda b: {"double": b["v"] * 2})

    def boom(batch):
        if batch["v"][0] >= 6:
            raise ZeroDivisionError("bad row")
        return batch

    bad = rd.from_pandas(__import__("pandas").DataFrame({"v": np.arange(12)})).map_batches(
        boom, batch_format="pandas"
    )
    with pytest.raises(RunError) as ei:
        TorchTrainer(
            _map_and_fail,
            datasets={"train": ds, "bad": bad},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=QUIET,
        ).fit()
    e = ei.value
    assert e.result.metrics["got"] == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]  # rank 0's rows, doubled
    text = str(e)
    assert (
        "map_batches(test_map_batches_runs_on_ranks_and_its_error_names_the_batch.<locals>.boom) "
        "raised on batch 0 of rank 1"
        in text
        or "raised on batch 2 of rank 0" in text
    ), text
    assert "ZeroDivisionError: bad row" in text
    assert 'raise ZeroDivisionError("bad row")' in text  # the remote traceback, with the user's line
    _wait_no_segments(warm)


def _sleeps_with_data():
    import raynb.train as rt

    len(rt.get_dataset_shard("train"))
    time.sleep(60)


def _dies_with_data():
    import raynb.train as rt

    next(iter(rt.get_dataset_shard("train").iter_batches()))
    if rt.get_context().get_world_rank() == 1:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def test_segments_freed_on_cancel_and_worker_death(warm):
    ds = rd.from_numpy(np.zeros((1000, 256), np.float32))
    seen = []
    agent = _agent(warm)

    def interrupt_when_placed():
        deadline = time.monotonic() + 20
        while not shm.segments(*agent) and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.append(sum(shm.segments(*agent).values()))
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=interrupt_when_placed, daemon=True)
    t.start()
    with pytest.raises(KeyboardInterrupt):
        TorchTrainer(
            _sleeps_with_data,
            datasets={"train": ds},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=QUIET,
        ).fit()
    t.join()
    assert seen and seen[0] >= ds.size_bytes()
    _wait_no_segments(warm)
    wait_idle_workers(warm, 4)
    with pytest.raises(RunError, match="rank 1"):
        TorchTrainer(
            _dies_with_data,
            datasets={"train": ds},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=QUIET,
        ).fit()
    _wait_no_segments(warm)
    wait_idle_workers(warm, 4)


def _tune_trial(config):
    import raynb.train as rt

    shard = rt.get_dataset_shard("train")
    n = sum(len(b["id"]) for b in shard.iter_batches(batch_size=50))
    segs = sorted(shm.segments(os.environ["RAYNB_NODE_ID"]))
    time.sleep(0.3)  # both trials hold it at once
    rt.report({"rows": n, "segments": ",".join(segs), "lr": config["lr"]})


def test_tune_trials_share_one_copy_per_node(warm):
    from raynb.tune import TuneConfig, Tuner, grid_search

    ds = rd.from_numpy({"id": np.arange(300), "x": np.zeros((300, 32), np.float32)})
    trainer = TorchTrainer(
        _tune_trial, datasets={"train": ds}, scaling_config=ScalingConfig(num_workers=2), run_config=QUIET
    )
    grid = Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": grid_search([0.1, 0.2])}},
        tune_config=TuneConfig(max_concurrent_trials=2),
        run_config=RunConfig(verbose=0),
    ).fit()
    df = grid.get_dataframe()
    assert sorted(df["lr"]) == [0.1, 0.2] and list(df["rows"]) == [150, 150]
    assert len(set(df["segments"])) == 1 and "," not in df["segments"].iloc[0]  # one segment, both trials
    _wait_no_segments(warm)


def test_magic_data_option(ip):
    ip.user_ns["TABLE"] = np.arange(40, dtype=np.float64)
    _, cap = ok_cell(
        ip,
        "%%ray_train --workers 2 --quiet --data train=TABLE,val=TABLE[:8] --out got\n"
        "import raynb.train as rt\n"
        "got = [len(rt.get_dataset_shard('train')), len(rt.get_dataset_shard('val'))]\n",
    )
    assert ip.user_ns["got"] == [20, 4]


def test_bad_input_is_named_before_anything_ships(warm, tmp_path):
    def tain():
        get_dataset_shard("tain")

    ds = rd.from_numpy({"a": np.zeros(4)})
    with pytest.raises(
        RunError, match=r"KeyError.*get_dataset_shard\('tain'\).*given 'train', 'val'"
    ) as info:
        TorchTrainer(
            tain,
            datasets={"train": ds, "val": ds},
            scaling_config=ScalingConfig(num_workers=1),
            run_config=QUIET,
        ).fit()
    assert "in __call__" not in str(info.value)  # the rank's traceback starts at the user's code (no wrapper)
    with pytest.raises(ValueError, match="column 'b' has 3 rows but column 'a' has 4"):
        rd.from_numpy({"a": np.zeros(4), "b": np.zeros(3)})
    with pytest.raises(ValueError, match=r"datasets\['train'\]: column 't' has dtype datetime64"):
        TorchTrainer(tain, datasets={"train": rd.from_numpy({"t": np.zeros(4, dtype="datetime64[s]")})})
    with pytest.raises(FileNotFoundError, match="nope.parquet' does not exist"):
        rd.read_parquet(str(tmp_path / "nope.parquet"))
    with pytest.raises(FileNotFoundError, match="no file matches"):
        rd.read_parquet(str(tmp_path / "*.parquet"))
    with pytest.raises(
        MemoryError,
        match=r"needs \d+ bytes \(.* MiB\) of shared memory in /dev/shm on this node, "
        r"but /dev/shm has \d+ bytes .* free\. Fixes: use a file dataset.*"
        r"read_parquet.*more room.*fewer copies",
    ):
        shm.check_room(shm.free_bytes() + 1, "a dataset")
    with pytest.raises(TypeError, match=r"datasets\['x'\] is a ndarray"):
        TorchTrainer(tain, datasets={"x": np.zeros(3)})


def _stream_rss(config):
    import threading as th

    import psutil
    import pyarrow.dataset  # noqa: F401 - the library's own size is not the data's
    import pyarrow.parquet  # noqa: F401

    import raynb.train as rt

    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = [base]
    done = th.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.005)

    t = th.Thread(target=sample, daemon=True)
    t.start()
    rows, total = 0, 0.0
    shard = rt.get_dataset_shard("train")
    for b in shard.iter_torch_batches(batch_size=1024, prefetch_batches=2):
        rows += len(b["f0"])
        total += float(b["f0"].sum())
    done.set()
    t.join()
    report({"rows": rows, "peak_extra": peak[0] - base, "total": total, "count": len(shard)})


def test_parquet_streams_each_rank_its_row_groups_in_bounded_memory(warm, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows_per_file, files = 400_000, 4
    cols = 16  # 400k x 16 float64 = 51 MB a file, 205 MB in all; row groups of 3.2 MB
    rng = np.random.default_rng(1)
    for i in range(files):
        table = pa.table({f"f{c}": rng.random(rows_per_file) for c in range(cols)})
        pq.write_table(table, tmp_path / f"part{i}.parquet", row_group_size=25_000)
    ds = rd.read_parquet(str(tmp_path / "*.parquet"))
    assert ds.count() == files * rows_per_file
    dataset_bytes = files * rows_per_file * cols * 8
    result = TorchTrainer(
        _stream_rss, datasets={"train": ds}, scaling_config=ScalingConfig(num_workers=2), run_config=QUIET
    ).fit()
    m = result.metrics
    assert m["rows"] == m["count"] == files * rows_per_file // 2  # half the rows each
    assert m["peak_extra"] < 48 << 20, m  # the cap: far below its half of the data (102 MB)
    assert dataset_bytes // 2 > 2 * (48 << 20)
    assert not _segments(warm)  # files never go to shared memory


def spec_written(scope) -> list:
    """One local node agent: the block was written while pickling (no data_needed)."""
    return scope.written()


def test_segments_freed_when_the_cluster_stops_and_after_a_killed_node_agent(tmp_path, monkeypatch):
    ds = rd.from_numpy(np.zeros((2000, 128), np.float32))
    with private_cluster(tmp_path, monkeypatch, workers=1) as (info, client, pids):
        node_id, agent = _agent(client)
        # A segment of this agent, as a run would leave it if the agent were SIGKILLed
        # (it cannot remove its own then): the next agent removes it.
        from raynb.client import bulk

        with bulk.active("orphan_key") as scope:
            block = scope.place("t", ds, ds._source.columns(), "test data")
        assert spec_written(scope) == [{"node_id": node_id, "pid": agent, "blocks": [block.block_id]}]
        bulk._scopes.pop("orphan_key")
        assert shm.segments(node_id, agent) == {block.segment(node_id): block.nbytes}
        os.kill(agent, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            nodes = client.status()["nodes"]
            if nodes and nodes[0]["pid"] != agent:
                break
            time.sleep(0.1)
        assert nodes and nodes[0]["pid"] != agent, "the head did not restart its node agent"
        assert not shm.segments(node_id, agent), "a new agent left the killed one's segment"
        wait_idle_workers(client, 1)
        # A running run's data when the cluster stops: freed with it.
        ready = threading.Event()

        def run():
            try:
                TorchTrainer(
                    _sleeps_with_data,
                    datasets={"train": ds},
                    scaling_config=ScalingConfig(num_workers=1),
                    run_config=QUIET,
                ).fit()
            except Exception:  # noqa: BLE001 - the run fails with the cluster
                pass
            ready.set()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        deadline = time.monotonic() + 20
        while not shm.segments(node_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        held = shm.segments(node_id)
        assert held and sum(held.values()) >= ds.size_bytes()
    t.join(15)
    assert not set(held) & set(shm.segments()), "segments left after the cluster stopped"


def test_data_socket_path_signed_chunked_one_copy(warm, monkeypatch):
    """The path to node agents on other hosts (forced here for the local one): the bytes go
    to the agent's own data socket in signed 1 MiB pieces, the head never sees them."""
    import zmq

    from raynb.cluster.node import data_server
    from raynb.cluster.protocol import messages

    monkeypatch.setenv("RAYNB_DATA_VIA_SOCKET", "1")
    sent = []
    real_send = data_server.send_segment

    def counted(*args, **kwargs):  # the real sender, counted
        sent.append(args[3])
        return real_send(*args, **kwargs)

    monkeypatch.setattr(data_server, "send_segment", counted)
    x = np.arange(64 << 20, dtype=np.float32).reshape(-1, 16)  # 256 MiB: 256 pieces, window of 8
    ds = rd.from_numpy({"x": x})

    def check():
        import raynb.train as rt

        batch = next(iter(rt.get_dataset_shard("train").iter_batches(batch_size=4, prefetch_batches=0)))
        return float(batch["x"][0, 0])

    from raynb.train.datasets import with_datasets
    from raynb.train.fit_run import execute_run

    agent_before = _agent(warm)
    result, firsts = execute_run(
        with_datasets(_every_rank(check), {"train": ds}), None, ScalingConfig(num_workers=2), QUIET
    )
    assert firsts == [0.0, float(x[len(x) // 2, 0])]
    assert _agent(warm) == agent_before and not result.failures  # its heartbeats went on: not lost
    assert len(sent) == 1 and sent[0].startswith(f"raynb-{_agent(warm)[0]}-")  # one copy, by the socket
    _wait_no_segments(warm)
    monkeypatch.undo()
    # A piece signed with another key, or named for another agent, makes nothing.
    node = warm.status()["nodes"][0]
    addr = f"tcp://127.0.0.1:{node['data_port']}"
    ctx = zmq.Context.instance()
    with pytest.raises(TimeoutError):  # dropped unverified: no answer to a forged message
        data_server.send_segment(
            ctx,
            b"not-the-key" * 4,
            addr,
            shm.segment_name(node["node_id"], node["pid"], "k"),
            {"a": x[:10]},
            *shm.layout_of({"a": x[:10]}),
            timeout_s=1.0,
        )
    with pytest.raises(OSError, match="is not a segment name of node agent"):
        data_server.send_segment(
            ctx,
            warm.session.key,
            addr,
            shm.segment_name("elsewhere", 1, "k"),
            {"a": x[:10]},
            *shm.layout_of({"a": x[:10]}),
        )
    assert not _segments(warm) and not shm.segments("elsewhere")
    assert messages.DATA_PUT in messages.MESSAGE_TYPES


def test_data_socket_is_curve_encrypted_off_loopback():
    """A node agent of a Curve cluster (head off loopback) makes its data socket a Curve
    server of its own key: the cluster's client key gets in, any other is refused at the
    handshake (the real sockets, on loopback here)."""
    import zmq

    from raynb.cluster.node import data_server
    from raynb.cluster.protocol import curve_auth as curve

    keys = curve.new_keys()
    client_keys = curve.client_part(keys)
    ctx = zmq.Context()
    server = data_server.DataServer(
        ctx, b"k" * 64, "127.0.0.1", f"curvetest{os.getpid()}", curve_keys=client_keys
    )
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            if server.sock.poll(50):
                server.handle()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    a = np.arange(300_000, dtype=np.float64)  # 2.4 MB: three pieces
    layout, nbytes = shm.layout_of({"a": a})
    addr = f"tcp://127.0.0.1:{server.port}"
    name = shm.segment_name(f"curvetest{os.getpid()}", os.getpid(), "curvekey")
    try:
        assert server.public_key and len(server.public_key) == 40
        other = curve.client_part(curve.new_keys())
        with pytest.raises(TimeoutError):  # an unknown client key never gets through
            data_server.send_segment(
                ctx,
                b"k" * 64,
                addr,
                name,
                {"a": a},
                layout,
                nbytes,
                timeout_s=1.0,
                curve_keys=other,
                server_key=server.public_key,
            )
        assert not shm.segments(f"curvetest{os.getpid()}")
        data_server.send_segment(
            ctx,
            b"k" * 64,
            addr,
            name,
            {"a": a},
            layout,
            nbytes,
            curve_keys=client_keys,
            server_key=server.public_key,
        )
        assert shm.segments(f"curvetest{os.getpid()}") == {name: nbytes}
        mm = shm.map_segment(name)
        assert np.array_equal(shm.arrays_from(mm, layout)["a"], a)
        del mm
    finally:
        stop.set()
        t.join()
        server.close()
        ctx.term()
        shm.free_agent(f"curvetest{os.getpid()}", os.getpid())


def _rows_of_shard():
    report(
        {
            "rows": len(get_dataset_shard("train")),
            "ids": np.concatenate([b["id"] for b in get_dataset_shard("train").iter_batches()]).tolist(),
        }
    )


def test_restore_reads_the_saved_file_dataset_again(warm, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": np.arange(30)}), tmp_path / "t.parquet", row_group_size=10)
    first = TorchTrainer(
        _rows_of_shard,
        datasets={"train": rd.read_parquet(str(tmp_path / "t.parquet"))},
        scaling_config=ScalingConfig(num_workers=3),
        run_config=QUIET,
    ).fit()
    again = TorchTrainer.restore(first.path).fit()  # function.pkl holds the dataset: the files are read again
    assert first.metrics["ids"] == again.metrics["ids"] == list(range(10))  # rank 0: a whole row group


def test_local_shuffle_and_file_pieces_without_a_cluster(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from raynb.data import sharding

    ds = rd.from_numpy({"id": np.arange(100)})
    ids = [
        b["id"].tolist()
        for b in ds.iter_batches(batch_size=10, local_shuffle_buffer_size=25, local_shuffle_seed=3)
    ]
    flat = sum(ids, [])
    assert sorted(flat) == list(range(100)) and flat != list(range(100))
    assert sorted(flat[:30]) == list(range(30))  # within a window: 25 rows or more, whole blocks of 10
    # whole units when they divide evenly among the ranks, row ranges (padded) otherwise
    assert [sharding.rank_pieces([10] * 4, 4, r) for r in range(4)] == [[(r, 0, 10)] for r in range(4)]
    assert sharding.rank_pieces([10, 10, 10], 4, 3) == [(2, 4, 10), (0, 0, 2)]
    for i in range(3):
        pq.write_table(
            pa.table({"id": np.arange(i * 7, i * 7 + 7)}), tmp_path / f"p{i}.parquet", row_group_size=4
        )
    files = rd.read_parquet(str(tmp_path))
    got = [
        sum((b["id"].tolist() for b in files.shard(2, r).iter_batches(batch_size=3)), []) for r in range(2)
    ]
    assert got == [list(range(11)), list(range(11, 21)) + [0]]  # 21 rows: 11 each, padded by wrapping


def test_read_with_columns_keeps_only_those_and_a_class_is_built_once(tmp_path):
    import pandas as pd

    df = pd.DataFrame({"id": np.arange(10), "a": np.arange(10) * 2.0, "b": np.ones(10)})
    df.to_parquet(tmp_path / "t.parquet")
    df.to_csv(tmp_path / "t.csv", index=False)
    for ds in (
        rd.read_parquet(str(tmp_path / "t.parquet"), columns=["id", "a"]),
        rd.read_csv(str(tmp_path / "t.csv"), columns=["a"]),
    ):
        want = ["id", "a"] if "id" in ds.schema().names else ["a"]
        assert ds.schema().names == want and ds.count() == 10
        batch = next(iter(ds.iter_batches(batch_size=10)))
        assert sorted(batch) == sorted(want) and batch["a"].tolist() == (np.arange(10) * 2.0).tolist()
    with pytest.raises(ValueError, match=r"columns \['z'\] are not in the files"):
        rd.read_parquet(str(tmp_path / "t.parquet"), columns=["z"])

    class Predictor:  # a class on the lazy path: built once per reading process, as Ray's actor
        built = 0

        def __init__(self):
            Predictor.built += 1

        def __call__(self, batch):
            return batch

    ds = rd.from_numpy({"a": np.zeros(4)}).map_batches(Predictor, concurrency=2)
    assert [len(b["a"]) for b in ds.iter_batches(batch_size=1)] == [1] * 4 and Predictor.built == 1


def test_data_socket_unfinished_segment_is_dropped_with_its_key():
    import zmq

    from raynb.cluster.node import data_server
    from raynb.cluster.protocol import messages

    ctx, key = zmq.Context(), b"k" * 64
    server = data_server.DataServer(ctx, key, "127.0.0.1", "droptest")
    sock = ctx.socket(zmq.DEALER)
    messages.configure_socket(sock, limit=data_server.FRAME_LIMIT + (64 << 10))
    sock.connect(f"tcp://127.0.0.1:{server.port}")
    session = messages.Session(key, validate=True, frame_bytes=data_server.FRAME_LIMIT)
    name = shm.segment_name("droptest", os.getpid(), "dropkey")
    try:
        session.send(
            sock, messages.DATA_PUT, {"name": name, "offset": 0, "nbytes": 1 << 20}, buffers=[b"x" * 1000]
        )
        assert server.sock.poll(5000)
        server.handle()  # the first piece: created, then the sender goes quiet
        assert shm.segments("droptest") == {name: 1 << 20} and name in server._open
        server.drop_key("dropkey")  # the run ended (free_data)
        assert not server._open and not shm.segments("droptest")
    finally:
        sock.close(0)
        server.close()
        ctx.term()
        shm.free_agent("droptest", os.getpid())


class _NoView:
    def handle(self, event):
        pass

    def finish(self):
        pass


def _first_row():
    import raynb.train as rt

    return float(next(iter(rt.get_dataset_shard("train").iter_batches(batch_size=4)))["x"][0, 0])


def test_a_placed_run_waits_for_its_data_and_fails_naming_why(tmp_path, monkeypatch):
    """The head asks the run's client for the data once the ranks are placed (data_needed),
    and starts them only on data_ready: no answer within RAYNB_DATA_WAIT_S, or a
    data_failed, fails the run with the reason and gives its workers back; a run without
    in-memory data is never held."""
    from raynb.client import bulk
    from raynb.client.submit_and_follow import build_submission, follow_run, submit_run_accepted
    from raynb.cluster.protocol import control, messages
    from raynb.train.datasets import with_datasets

    ds = rd.from_numpy({"x": np.arange(4000, dtype=np.float32).reshape(-1, 4) + 7})
    with private_cluster(tmp_path, monkeypatch, workers=1, env={"RAYNB_DATA_WAIT_S": "1.5"}) as (
        info,
        client,
        _,
    ):
        node_id, agent = _agent(client)
        wait_idle_workers(client, 1)

        def submit(fn):
            spec, payload = build_submission(fn, None, ScalingConfig(num_workers=1), QUIET)
            submit_run_accepted(client, spec, payload)
            return spec

        def needed(run_id):  # the head's ask, with the client's own answer switched off
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                msg = client.recv(1.0)
                if (
                    msg is not None
                    and msg.msg_type == messages.DATA_NEEDED
                    and msg.content["run_id"] == run_id
                ):
                    return msg.content
            raise AssertionError("no data_needed from the head")

        with monkeypatch.context() as m:
            m.delitem(control.Client.handlers, messages.DATA_NEEDED)
            m.setenv("RAYNB_DATA_VIA_SOCKET", "1")  # else one local node is written while pickling
            spec = submit(with_datasets(_first_row, {"train": ds}))
            ask = needed(spec["run_id"])
            assert spec["shared_data"]["key"] == spec["run_id"] == ask["key"]
            assert [(n["node_id"], n["pid"], n["blocks"]) for n in ask["nodes"]] == [
                (node_id, agent, spec["shared_data"]["blocks"])
            ]
            assert not _segments(client)  # nothing written before the ask is answered
            time.sleep(2.0)  # no answer: the attempt times out
            done = follow_run(client, spec["run_id"], _NoView())
            assert done.state == "FAILED"
            assert "did not write the run's in-memory data to node(s) " + node_id in str(
                done.record["errors"]
            )
            bulk.forget(spec["run_id"])
            spec = submit(with_datasets(_first_row, {"train": ds}))
            ask = needed(spec["run_id"])
            client.send(
                messages.DATA_FAILED,
                {
                    "run_id": spec["run_id"],
                    "attempt": ask["attempt"],
                    "message": f"node {node_id}: OSError: the disk is on fire",
                },
            )
            done = follow_run(client, spec["run_id"], _NoView())
            assert done.state == "FAILED" and "the disk is on fire" in str(done.record["errors"])
            bulk.forget(spec["run_id"])
            # a client gone when its run is placed: failed then, saying so (not after the wait)
            sleeper = submit(lambda: time.sleep(1.0))  # holds the only worker meanwhile
            gone = control.Client(client.address, client.session.key, client.info)
            spec, payload = build_submission(
                with_datasets(_first_row, {"train": ds}), None, ScalingConfig(num_workers=1), QUIET
            )
            submit_run_accepted(gone, spec, payload)
            gone.close()
            assert follow_run(client, sleeper["run_id"], _NoView()).state == "FINISHED"
            deadline = time.monotonic() + 10
            while True:
                rec = client.request(
                    messages.GET_RUN, {"run_id": spec["run_id"]}, reply_types=(messages.RUN_RECORD,)
                ).content["record"]
                if rec["state"] != "PENDING" or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert rec["state"] == "FAILED" and "the notebook that submitted the run is gone" in str(rec), rec
            bulk.forget(spec["run_id"])
        # the workers were given back; one local node is written while pickling: no ask at all
        with monkeypatch.context() as m:
            m.delitem(control.Client.handlers, messages.DATA_NEEDED)
            assert (
                TorchTrainer(
                    lambda: report({"v": _first_row()}),
                    datasets={"train": ds},
                    scaling_config=ScalingConfig(num_workers=1),
                    run_config=QUIET,
                )
                .fit()
                .metrics["v"]
                == 7.0
            )
        spec = submit(lambda: 1)
        assert "shared_data" not in spec  # no data: no round trip
        assert follow_run(client, spec["run_id"], _NoView()).state == "FINISHED"
        _wait_no_segments(client)
