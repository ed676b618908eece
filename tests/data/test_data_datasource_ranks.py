"""A user's ``Datasource`` read by a run: each rank runs only the read tasks that hold
its rows, on the rank itself, and gets disjoint, equal shards through
``iter_torch_batches`` (the shared 4-worker cluster, 2 ranks)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

import raynb.data as rd
from raynb.data.block import BlockMetadata
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer


class LoggedRangeDatasource(rd.Datasource):
    """Rows ``id`` 0..n-1 in ``parallelism`` read tasks; each task, when run, appends
    ``<pid> <task>`` to ``log`` (so the test sees where and which tasks ran)."""

    def __init__(self, n: int, log: str):
        super().__init__()
        self.n, self.log = n, log

    def estimate_inmemory_data_size(self):
        return self.n * 8

    def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
        bounds = np.linspace(0, self.n, parallelism + 1).astype(int)
        tasks = []
        for t, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):

            def read(t=t, lo=int(lo), hi=int(hi), log=self.log):
                with open(log, "a") as f:
                    f.write(f"{os.getpid()} {t}\n")
                return [pa.table({"id": np.arange(lo, hi, dtype=np.int64)})]

            tasks.append(rd.ReadTask(read, BlockMetadata(num_rows=int(hi - lo), size_bytes=int(hi - lo) * 8)))
        return tasks


def _rank_ids(config):
    import torch.distributed as dist

    import raynb.train as rt

    shard = rt.get_dataset_shard("train")
    ids = []
    for batch in shard.iter_torch_batches(batch_size=7, prefetch_batches=1):
        assert str(batch["id"].dtype) == "torch.int64"
        ids += batch["id"].tolist()
    mine = {"pid": os.getpid(), "ids": ids}
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, mine)
    rt.report({"ranks": out})


def test_a_datasource_is_read_on_the_ranks_each_its_own_tasks(warm, tmp_path):
    log = str(tmp_path / "reads.log")
    ds = rd.read_datasource(LoggedRangeDatasource(40, log), override_num_blocks=4)
    assert not os.path.exists(log)  # counted from the metadata: nothing read here
    result = TorchTrainer(
        _rank_ids,
        datasets={"train": ds},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path / "runs")),
    ).fit()
    ranks = result.metrics["ranks"]
    assert [r["ids"] for r in ranks] == [list(range(0, 20)), list(range(20, 40))]
    reads = [line.split() for line in open(log).read().split("\n") if line]
    by_pid = {}
    for pid, task in reads:
        by_pid.setdefault(int(pid), set()).add(int(task))
    assert by_pid == {ranks[0]["pid"]: {0, 1}, ranks[1]["pid"]: {2, 3}}
    assert os.getpid() not in by_pid
