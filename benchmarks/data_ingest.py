"""Getting data to the ranks: shared memory vs the captured-array path, iterators, parquet.
Prints one JSON object; every figure is measured side by side in this one run.

On a private cluster of 4 workers (its own temporary ``RAYNB_HOME`` and
``RAYNB_STORAGE_PATH``), stopped at the end whatever happens:

- ``array_to_4_ranks``: a ``--gib`` GiB float32 array to 4 ranks on this node (the
  shared-memory figures: the median of ``--repeat`` runs, their peak memory the largest). ``time_s``
  is from the call (submit) until every rank holds its shard (the latest rank's clock);
  ``node_peak_extra_mib`` the peak, over the start, of the private memory (RSS less shared
  pages) of the notebook process and the cluster's processes plus this cluster's
  ``/dev/shm`` segments, sampled every 20 ms. For:
  ``datasets`` (``TorchTrainer(datasets={"train": from_numpy(a)})``, ``get_dataset_shard``),
  ``captured_shm`` (the function reads the array: it now goes through shared memory by
  itself), ``datasets_via_data_socket`` (as ``datasets``, sent through the node agent's
  data socket as to an agent on another host, ``RAYNB_DATA_VIA_SOCKET=1``), ``captured_before`` (``RAYNB_SHM_THRESHOLD_BYTES=0``: pickled through the head to
  every rank, as before this change; refused over the 1 GiB message limit, so it is also
  timed at the ``--old-mib`` sizes; a run that fails there, its node agent starved of
  heartbeats, is recorded as failed), and ``floor_memcpy`` (one write of the array into ``/dev/shm``).
- ``iter_torch_batches``: rows/s on one rank, batch 256, over ``--rows`` x 32 float32 rows:
  ``DataIterator.iter_torch_batches`` vs ``DataLoader(TensorDataset(...), batch_size=256)``
  over the same tensors (the shard's own arrays), best of ``--passes``.
- ``parquet``: ``--parquet-mib`` MiB of generated float64 columns (row groups of 3.2 MB)
  streamed on 4 ranks with ``iter_batches`` vs one ``pyarrow.dataset`` scan in this
  process (the median of 3); the ranks' peak RSS over each worker's RSS when its function started.

Usage::

    python -m benchmarks.data_ingest                 # 1 GiB, 512 MiB parquet (~1-2 min)
    python -m benchmarks.data_ingest --quick         # small sizes, a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

import numpy as np
import psutil


class NodeMemory:
    """Peak private memory (RSS - shared) of this process and the cluster's, plus this
    cluster's /dev/shm segments, over the value when entered (bytes)."""

    def __init__(self, head_pid: int, agent: tuple):
        self.head, self.agent = psutil.Process(head_pid), agent

    def sample(self) -> int:
        from raynb.cluster.node import shm

        total = sum(shm.segments(*self.agent).values())
        for p in [psutil.Process(), self.head] + self.head.children(recursive=True):
            try:
                m = p.memory_info()
                total += m.rss - m.shared
            except psutil.Error:
                pass
        return total

    def __enter__(self):
        self.start, self.peak, self._stop = self.sample(), 0, threading.Event()

        def loop():
            while not self._stop.is_set():
                self.peak = max(self.peak, self.sample() - self.start)
                time.sleep(0.02)

        self._t = threading.Thread(target=loop, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def _all_ranks_max(value: float) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _holds_shard_ds(config):
    from raynb.train import get_dataset_shard, report

    shard = get_dataset_shard("train")
    b = next(iter(shard.iter_batches(batch_size=1, prefetch_batches=0)))
    report({"ready": _all_ranks_max(time.time()), "rows": len(shard), "x": float(b["data"][0])})


def _make_captured(a):
    def holds_captured(config):
        from raynb.train import get_context, report

        ctx = get_context()
        n = len(a) // ctx.get_world_size()
        part = a[ctx.get_world_rank() * n : (ctx.get_world_rank() + 1) * n]
        report({"ready": _all_ranks_max(time.time()), "rows": len(part), "x": float(part[0])})

    return holds_captured


def array_to_ranks(gib: float, old_mib: list, head_pid: int, agent: tuple, repeat: int) -> dict:
    import raynb.data as rd
    from raynb.cluster.node import shm
    from raynb.errors import RunError
    from raynb.train import RunConfig, ScalingConfig
    from raynb.train.torch import TorchTrainer

    a = np.ones(int(gib * (1 << 30)) // 4, dtype=np.float32)
    out = {"bytes": a.nbytes}

    def timed(fn, datasets=None, arr=a):
        with NodeMemory(head_pid, agent) as mem:
            t0 = time.time()
            try:
                res = TorchTrainer(
                    fn,
                    datasets=datasets,
                    scaling_config=ScalingConfig(num_workers=4),
                    run_config=RunConfig(verbose=0),
                ).fit()
            except (ValueError, MemoryError) as e:
                return {"refused": str(e)[:200]}
            except RunError as e:  # the captured path before this change: a starved node agent
                return {
                    "failed": str(e)[:300],
                    "seconds_until_failed": round(time.time() - t0, 2),
                    "node_peak_extra_mib": round(mem.peak / 2**20),
                }
        return {
            "time_s": round(res.metrics["ready"] - t0, 3),
            "node_peak_extra_mib": round(mem.peak / 2**20),
            "bytes": arr.nbytes,
        }

    def median_of(runs: list) -> dict:
        ok = [r for r in runs if "time_s" in r]
        if not ok:
            return runs[-1]
        return {
            "time_s": statistics.median(r["time_s"] for r in ok),
            "time_s_all": [r["time_s"] for r in ok],
            "node_peak_extra_mib": max(r["node_peak_extra_mib"] for r in ok),
            "bytes": ok[0]["bytes"],
        }

    out["datasets"] = median_of([timed(_holds_shard_ds, {"train": rd.from_numpy(a)}) for _ in range(repeat)])
    out["captured_shm"] = median_of([timed(_make_captured(a)) for _ in range(repeat)])
    os.environ["RAYNB_DATA_VIA_SOCKET"] = "1"  # the path to node agents on other hosts
    try:
        out["datasets_via_data_socket"] = timed(_holds_shard_ds, {"train": rd.from_numpy(a)})
    finally:
        del os.environ["RAYNB_DATA_VIA_SOCKET"]
    os.environ["RAYNB_SHM_THRESHOLD_BYTES"] = "0"
    try:
        out["captured_before"] = timed(_make_captured(a))
        for mib in old_mib:
            small = np.ones(mib * (1 << 20) // 4, dtype=np.float32)
            out[f"captured_before_{mib}mib"] = timed(_make_captured(small), arr=small)
            del small
    finally:
        del os.environ["RAYNB_SHM_THRESHOLD_BYTES"]
    floors = []
    for _ in range(repeat):
        with NodeMemory(head_pid, agent) as mem:
            t0 = time.time()
            name = shm.segment_name(*agent, "benchfloor")
            layout, nbytes = shm.layout_of({"a": a})
            shm.write_segment(name, {"a": a}, layout, nbytes)
            floors.append(time.time() - t0)
        shm.remove(name)
    floor = statistics.median(floors)
    out["floor_memcpy"] = {
        "time_s": round(floor, 3),
        "time_s_all": [round(f, 3) for f in floors],
        "node_peak_extra_mib": round(mem.peak / 2**20),
    }
    d = out["datasets"]
    if "time_s" in d:
        out["datasets_vs_floor_time"] = round(d["time_s"] / max(floor, 1e-9), 2)
    return out


def _throughput(config):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from raynb.train import get_dataset_shard, report

    shard = get_dataset_shard("train")
    cols = shard._ds._source.columns()
    tensors = TensorDataset(torch.from_numpy(cols["x"].copy()), torch.from_numpy(cols["y"].copy()))
    ours, theirs = [], []
    for _ in range(config["passes"]):
        t0, n = time.perf_counter(), 0
        for b in shard.iter_torch_batches(batch_size=256):
            n += len(b["y"])
        ours.append(n / (time.perf_counter() - t0))
        t0, n = time.perf_counter(), 0
        for _x, yb in DataLoader(tensors, batch_size=256):
            n += len(yb)
        theirs.append(n / (time.perf_counter() - t0))
    report({"iter_torch_batches_rows_s": max(ours), "dataloader_rows_s": max(theirs)})


def iterators(rows: int, passes: int) -> dict:
    import raynb.data as rd
    from raynb.train import RunConfig, ScalingConfig
    from raynb.train.torch import TorchTrainer

    rng = np.random.default_rng(0)
    ds = rd.from_numpy(
        {"x": rng.random((rows, 32), dtype=np.float32), "y": rng.random(rows, dtype=np.float32)}
    )
    m = (
        TorchTrainer(
            _throughput,
            train_loop_config={"passes": passes},
            datasets={"train": ds},
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(verbose=0),
        )
        .fit()
        .metrics
    )
    return {
        "rows": rows,
        "batch_size": 256,
        "iter_torch_batches_rows_s": round(m["iter_torch_batches_rows_s"]),
        "dataloader_tensordataset_rows_s": round(m["dataloader_rows_s"]),
        "ratio": round(m["iter_torch_batches_rows_s"] / m["dataloader_rows_s"], 2),
    }


def _stream(config):
    import pyarrow.dataset  # noqa: F401 - imported before the clock and the RSS baseline start
    import pyarrow.parquet  # noqa: F401

    from raynb.train import get_dataset_shard, report

    me = psutil.Process()
    base = me.memory_info().rss
    peak, done = [base], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], me.memory_info().rss)
            time.sleep(0.005)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    t0, n = time.time(), 0
    for b in get_dataset_shard("train").iter_batches(batch_size=4096, prefetch_batches=2):
        n += len(b["f0"])
    elapsed = time.time() - t0
    done.set()
    t.join()
    report({"rows": n, "seconds": _all_ranks_max(elapsed), "peak_extra": _all_ranks_max(peak[0] - base)})


def parquet(mib: int, tmp: str) -> dict:
    import pyarrow as pa
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    import raynb.data as rd
    from raynb.train import RunConfig, ScalingConfig
    from raynb.train.torch import TorchTrainer

    cols, rows_per_file = 16, 400_000  # 51 MB a file
    files = max(1, round(mib * (1 << 20) / (cols * 8 * rows_per_file)))
    rng = np.random.default_rng(0)
    for i in range(files):
        pq.write_table(
            pa.table({f"f{c}": rng.random(rows_per_file) for c in range(cols)}),
            os.path.join(tmp, f"part-{i:03d}.parquet"),
            row_group_size=25_000,
        )
    paths = sorted(os.path.join(tmp, f) for f in os.listdir(tmp))
    total = files * rows_per_file
    scans = []
    for _ in range(3):
        t0, n = time.time(), 0
        for rb in pads.dataset(paths, format="parquet").to_batches():
            n += rb.num_rows
        scans.append(time.time() - t0)
    single = statistics.median(scans)
    m = (
        TorchTrainer(
            _stream,
            datasets={"train": rd.read_parquet(paths)},
            scaling_config=ScalingConfig(num_workers=4),
            run_config=RunConfig(verbose=0),
        )
        .fit()
        .metrics
    )
    return {
        "bytes": total * cols * 8,
        "rows": total,
        "files": files,
        "single_scan_rows_s": round(n / single),
        "four_ranks_rows_s": round(total / m["seconds"]),
        "ratio": round((total / m["seconds"]) / (n / single), 2),
        "peak_rss_over_idle_mib_per_rank": round(m["peak_extra"] / 2**20, 1),
        "rows_per_rank": m["rows"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument(
        "--old-mib",
        type=lambda t: [int(x) for x in t.split(",")],
        default=[64, 256],
        help="sizes (MiB, comma-separated) the captured path before this change is timed at",
    )
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each shared-memory figure (median)")
    ap.add_argument("--parquet-mib", type=int, default=512)
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    args = ap.parse_args(argv)
    if args.quick:
        args.gib, args.old_mib, args.rows, args.passes, args.parquet_mib = 0.0625, [16], 20_000, 1, 50
        args.repeat = 1
    tmp = tempfile.mkdtemp(prefix="raynb-bench-data-")
    os.environ["RAYNB_HOME"] = os.path.join(tmp, "home")
    os.environ["RAYNB_STORAGE_PATH"] = os.path.join(tmp, "results")
    pq_dir = os.path.join(tmp, "parquet")
    os.makedirs(pq_dir)
    import raynb
    from raynb.cluster.launch import cluster_pids, start_cluster, stop_cluster

    info, _ = start_cluster(num_workers=4)
    pids = set(cluster_pids(info))
    out = {"load_average_start": os.getloadavg()[0], "cpus": os.cpu_count()}
    try:
        client = raynb.connect()
        st = client.status()
        node = st["nodes"][0]
        agent = (node["node_id"], node["pid"])
        out["array_to_4_ranks"] = array_to_ranks(args.gib, args.old_mib, st["pid"], agent, args.repeat)
        out["iter_torch_batches"] = iterators(args.rows, args.passes)
        out["parquet"] = parquet(args.parquet_mib, pq_dir)
        out["load_average_end"] = os.getloadavg()[0]
    finally:
        raynb.disconnect()
        stop_cluster()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in pids):
            time.sleep(0.1)
        for p in pids:
            try:
                psutil.Process(p).kill()
            except psutil.Error:
                pass
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
