"""How ``iter_torch_batches`` grows with the dataset's size. Prints one JSON object.

On a private cluster of 2 workers (its own temporary ``RAYNB_HOME`` and
``RAYNB_STORAGE_PATH``; stopped and removed at the end whatever happens), for each size
of ``--sizes`` (MiB):

- ``parquet[i]``: generated parquet files (16 float64 columns, 32 MiB a file, row groups of
  32,768 rows) read with ``raynb.data.read_parquet`` and streamed on 2 ranks with
  ``iter_torch_batches(batch_size=4096)``: ``rows_s`` and ``mb_s`` (all ranks together: rows
  and bytes over the slowest rank's time), ``per_rank`` (the largest over the ranks of:
  ``peak_rss_mib``, the process's peak RSS, sampled every 5 ms, and ``peak_extra_mib``,
  that peak over the RSS when the function started).
- ``map_batches``: the smallest size's files through ``map_batches(scale, batch_format="numpy",
  batch_size=4096)`` (every column times 2: a per-batch function that touches every value)
  and then the same ``iter_torch_batches`` loop, the same figures.
- ``in_memory[i]``: ``raynb.data.from_numpy`` of a float32 array of the same size (32 columns)
  plus a label, the same loop; sizes over half of ``/dev/shm``'s free space are skipped.
- ``ray_data``: Ray Data 2.60's ``read_parquet(...).iter_torch_batches`` over the smallest
  size's files in one process (``ray.init(num_cpus=2, include_dashboard=False)``), only with
  ``--ray`` and only if Ray starts within 60 s (else the reason): ``init_s``, ``rows_s``
  (from ``read_parquet`` to the last batch), ``rows_s_after_first_batch`` and
  ``first_batch_s`` (its streaming executor's start-up); then ``map_batches``: the same
  ``map_batches(scale, ...)`` and ``iter_torch_batches`` over the same files, ``rows_s``,
  ``rows_s_after_first_batch``, ``first_batch_s``.

Usage::

    python -m benchmarks.scale_data                    # 64 and 256 MiB
    python -m benchmarks.scale_data --sizes 1024,4096,16384 --ray
    python -m benchmarks.scale_data --quick            # 32 and 64 MiB (the tests)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks._common import machine_info, private_cluster  # noqa: E402

RANKS = 2
FILE_MIB = 32
COLS = 16


def _stream(config):
    """Every batch of this rank's shard as torch tensors; the rank's time and peak RSS."""
    import threading

    import psutil
    import pyarrow.parquet  # noqa: F401 - imported before the clock and the RSS baseline start
    import torch
    import torch.distributed as dist

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
    t0, rows, nbytes = time.perf_counter(), 0, 0
    for b in get_dataset_shard("train").iter_torch_batches(batch_size=4096):
        rows += len(next(iter(b.values())))
        nbytes += sum(v.numel() * v.element_size() for v in b.values())
    elapsed = time.perf_counter() - t0
    done.set()
    t.join()
    total = torch.tensor([rows, nbytes], dtype=torch.float64)
    worst = torch.tensor([elapsed, peak[0], peak[0] - base], dtype=torch.float64)
    dist.all_reduce(total)  # the ranks together
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)  # the slowest rank, the largest memory
    rows, nbytes = (float(v) for v in total)
    elapsed, peak_rss, extra = (float(v) for v in worst)
    report({"rows": rows, "bytes": nbytes, "seconds": elapsed, "peak": peak_rss, "extra": extra})


def scale(batch: dict) -> dict:
    """The per-batch function both map_batches runs apply: every column times 2."""
    return {k: v * 2 for k, v in batch.items()}


def _fit(ds) -> dict:
    """Stream ``ds`` on 2 ranks; the figures over all ranks."""
    from raynb.train import RunConfig, ScalingConfig
    from raynb.train.torch import TorchTrainer

    r = TorchTrainer(
        _stream,
        datasets={"train": ds},
        scaling_config=ScalingConfig(num_workers=RANKS),
        run_config=RunConfig(verbose=0),
    ).fit()
    m = r.metrics
    rows, nbytes, slowest = int(m["rows"]), m["bytes"], m["seconds"]
    return {
        "rows": rows,
        "seconds": round(slowest, 3),
        "rows_s": round(rows / slowest),
        "mb_s": round(nbytes / slowest / 1e6, 1),
        "per_rank": {
            "peak_rss_mib": round(m["peak"] / 2**20, 1),
            "peak_extra_mib": round(m["extra"] / 2**20, 1),
        },
    }


def write_parquet(mib: int, path: str) -> list[str]:
    """``mib`` MiB of float64 columns as 32 MiB parquet files under ``path``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(path, exist_ok=True)
    rows = FILE_MIB * 2**20 // (COLS * 8)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(max(1, mib // FILE_MIB)):
        p = os.path.join(path, f"part-{i:05d}.parquet")
        pq.write_table(pa.table({f"f{c}": rng.random(rows) for c in range(COLS)}), p, row_group_size=32_768)
        paths.append(p)
    return paths


def ray_data(paths: list[str]) -> dict:
    """Ray Data's iter_torch_batches over ``paths`` in a child process (its own Ray)."""
    code = (
        "import json,sys,time;t0=time.perf_counter();import ray;"
        "ray.init(num_cpus=2,include_dashboard=False,log_to_driver=False);t1=time.perf_counter()\n"
        "def stream(ds,t2):\n"
        " n=0;tf=None\n"
        " for b in ds.iter_torch_batches(batch_size=4096):\n"
        "  k=len(next(iter(b.values())));n+=k\n"
        "  if tf is None: tf,n0=time.perf_counter(),k\n"
        " t3=time.perf_counter()\n"
        " return {'rows':n,'rows_s':round(n/(t3-t2)),"
        "'rows_s_after_first_batch':round((n-n0)/max(t3-tf,1e-9)),'first_batch_s':round(tf-t2,2)}\n"
        "t2=time.perf_counter();out=stream(ray.data.read_parquet(sys.argv[1:]),t2)\n"
        "t2=time.perf_counter();ds=ray.data.read_parquet(sys.argv[1:]).map_batches("
        "lambda b:{k:v*2 for k,v in b.items()},batch_format='numpy',batch_size=4096)\n"
        "out['map_batches']=stream(ds,t2);ray.shutdown();out['init_s']=round(t1-t0,2)\n"
        "print(json.dumps(out))"
    )
    from benchmarks._common import run_child

    p = run_child([sys.executable, "-c", code, *paths], 600)  # its Ray ended with it on a timeout
    if p is None:
        return {"skipped": "Ray did not start and stream within 600 s on this machine"}
    if p.returncode != 0:
        return {"skipped": f"Ray failed: {p.stderr.strip().splitlines()[-1:]}"}
    out = json.loads(p.stdout.strip().splitlines()[-1])
    if out["init_s"] > 60:
        out["note"] = "ray.init took over 60 s: not a fair comparison on this machine"
    return out


def measure(sizes: list[int], tmp: str, with_ray: bool) -> dict:
    import raynb.data as rd

    out: dict = {"parquet": [], "in_memory": []}
    shm_free = shutil.disk_usage("/dev/shm").free if os.path.isdir("/dev/shm") else 0
    paths0 = None
    for mib in sizes:
        paths = write_parquet(mib, os.path.join(tmp, f"pq-{mib}"))
        out["parquet"].append({"mib": mib, "files": len(paths), **_fit(rd.read_parquet(paths))})
        print(json.dumps(out["parquet"][-1]), file=sys.stderr, flush=True)
        if paths0 is None:
            paths0 = paths
            ds = rd.read_parquet(paths).map_batches(scale, batch_format="numpy", batch_size=4096)
            out["map_batches"] = {"mib": mib, "files": len(paths), **_fit(ds)}
            print(json.dumps({"map_batches": out["map_batches"]}), file=sys.stderr, flush=True)
        else:
            shutil.rmtree(os.path.dirname(paths[0]), ignore_errors=True)  # disk: only the first is read again
        if mib * 2**20 * 2 > shm_free:
            out["in_memory"].append(
                {"mib": mib, "skipped": f"over half of /dev/shm's {shm_free >> 20} MiB free"}
            )
            continue
        rows = mib * 2**20 // 128
        rng = np.random.default_rng(0)
        ds = rd.from_numpy({"x": rng.random((rows, 32), dtype=np.float32), "y": np.zeros(rows, np.float32)})
        out["in_memory"].append({"mib": mib, **_fit(ds)})
        del ds
        print(json.dumps(out["in_memory"][-1]), file=sys.stderr, flush=True)
    out["ray_data"] = ray_data(paths0) if with_ray else {"skipped": "not asked (--ray)"}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=None, help="dataset sizes in MiB, comma-separated (default 64,256)")
    ap.add_argument("--ray", action="store_true", help="also Ray Data 2.60 on the smallest size's files")
    ap.add_argument("--quick", action="store_true", help="32 and 64 MiB (seconds)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("32,64" if args.quick else "64,256")).split(",")]
    if min(sizes) < FILE_MIB:
        ap.error(f"--sizes must be at least {FILE_MIB} MiB (one parquet file)")
    load0 = round(os.getloadavg()[0], 2)
    tmp = tempfile.mkdtemp(prefix="raynb-scale-data-")
    try:
        with private_cluster() as _:
            subprocess.run(
                [sys.executable, "-m", "raynb.cli", "start", "--workers", str(RANKS)],
                check=True,
                stdout=subprocess.DEVNULL,
                timeout=300,
            )
            import raynb

            raynb.connect()
            out = measure(sizes, tmp, args.ray)
            raynb.disconnect()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["settings"] = {"sizes_mib": sizes, "ranks": RANKS, "batch_size": 4096, "quick": args.quick}
    out["machine"] = machine_info(load0, loadavg_at_end=open("/proc/loadavg").read().split()[:3])
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
