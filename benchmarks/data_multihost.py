"""Datasets across hosts: network namespaces on this machine (``tests/support/netns.py``), a head
on 198.18.0.1, node agents on .2 and .3 (2 workers each), a notebook client on .4 with a
``/dev/shm`` of its own (so every byte goes to each node agent's CurveZMQ data socket,
``cluster.data_server``). Prints one JSON object; for each dataset size (float32 rows of
64 columns plus int64 labels), side by side:

- ``to_shards_s``: submit (``fit()`` called) to every one of the 4 ranks (2 per host,
  SPREAD) holding its first batch, through the data sockets (``via_sockets``) and, for
  comparison, with the client writing ``/dev/shm`` itself (``direct``: the notebook
  sharing the nodes' ``/dev/shm``, as on one host); ``floor_s``: two plain TCP copies of
  the dataset's bytes from the client's namespace, one to each node's (the data goes to
  both nodes, one after the other);
- ``mb_s``: the dataset's MiB sent to both nodes per second of ``to_shards_s``;
- ``segment_bytes_per_host``: what each node's ``/dev/shm`` held during the run (one copy);
- ``head_rss_mib``: the head's RSS before and its peak during the run (the bytes never
  pass through it).

Needs root (namespaces). Usage: ``python -m benchmarks.data_multihost [--quick]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]

from tests.support.multihost_fixture import Cluster, bench_args, hosts_up  # noqa: E402

RUN = """
import numpy as np
import torch.distributed as dist
from raynb import RunConfig, ScalingConfig, TorchTrainer
from raynb.cluster.node import shm
from raynb.train import get_context, get_dataset_shard, report
rows = (MIB << 20) // (64 * 4)
x = np.random.default_rng(0).random((rows, 64), dtype=np.float32)
ds = raynb.data.from_numpy({"x": x, "y": np.arange(rows, dtype=np.int64)})
def loop():
    shard = get_dataset_shard("train")
    next(iter(shard.iter_batches(batch_size=256, prefetch_batches=0)))
    held = time.time()
    dist.barrier()
    everyone = [None] * 4
    dist.all_gather_object(everyone, {"held": held, "node": os.environ["RAYNB_NODE_ID"],
                                      "bytes": sum(shm.segments(os.environ["RAYNB_NODE_ID"]).values())})
    report({"ranks": json.dumps(everyone)})
raynb.connect(KEY_FILE)
t0 = time.time()
r = TorchTrainer(loop, datasets={"train": ds}, run_config=RunConfig(verbose=0),
                 scaling_config=ScalingConfig(num_workers=4, placement_strategy="SPREAD")).fit()
fit_s = time.time() - t0
ranks = json.loads(r.metrics["ranks"])
print(json.dumps({"to_shards_s": max(x["held"] for x in ranks) - t0, "fit_s": fit_s,
                  "size_bytes": ds.size_bytes(), "per_host": {x["node"]: x["bytes"] for x in ranks}}))
"""

SOCKET_SERVER = """
import socket
s = socket.socket(); s.bind(("{ip}", 0)); s.listen(1); print(s.getsockname()[1], flush=True)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(1 << 20)
    if not b: break
    n += len(b)
c.sendall(b"ok")
"""

SOCKET_CLIENT = """
import socket, time
data = bytes({nbytes})
t0 = time.perf_counter()
c = socket.create_connection(("{ip}", {port}))
c.sendall(data); c.shutdown(socket.SHUT_WR); c.recv(2)
print(time.perf_counter() - t0)
"""


def _socket_copy_s(c: Cluster, host: str, nbytes: int) -> float:
    ip = c.net.ips[host]
    server = c.net.popen(
        host, [sys.executable, "-c", SOCKET_SERVER.format(ip=ip)], stdout=subprocess.PIPE, text=True
    )
    port = int(server.stdout.readline())
    r = c.net.run("client", [sys.executable, "-c", SOCKET_CLIENT.format(nbytes=nbytes, ip=ip, port=port)])
    server.wait(timeout=120)
    return float(r.stdout.strip())


def _peak_rss(pid: int, stop: threading.Event, out: list) -> None:
    p = psutil.Process(pid)
    while not stop.is_set():
        out.append(p.memory_info().rss)
        time.sleep(0.02)


def main() -> int:
    args = bench_args()
    if args is None:
        return 0
    sizes = (32, 128) if args.quick else (32, 256, 1024)
    base = Path(tempfile.mkdtemp(prefix="raynb-bench-data-multihost-"))
    out: dict = {"load_avg_start": os.getloadavg(), "sizes": {}}
    nodes = (("h1", f"bd{os.getpid()}a", 2), ("h2", f"bd{os.getpid()}b", 2))
    with hosts_up(base, nodes, tag="b", remove_base=True) as c:
        head = psutil.Process(int(json.loads((c.homes["head"] / "cluster.json").read_text())["pids"]["head"]))
        for mib in sizes:
            row: dict = {}
            for label, private in (("via_sockets", True), ("direct", False)):
                rss, stop = [head.memory_info().rss], threading.Event()
                t = threading.Thread(target=_peak_rss, args=(head.pid, stop, rss), daemon=True)
                t.start()
                r, _ = c.client(f"MIB = {mib}\n" + RUN, timeout=600, private_shm=private)
                stop.set()
                t.join()
                row[label] = {
                    "to_shards_s": round(r["to_shards_s"], 3),
                    "fit_s": round(r["fit_s"], 3),
                    "mb_s": round(2 * r["size_bytes"] / 2**20 / r["to_shards_s"], 1),
                    "segment_bytes_per_host": r["per_host"],
                    "head_rss_mib": [round(rss[0] / 2**20), round(max(rss) / 2**20)],
                }
                row["size_bytes"] = r["size_bytes"]
            row["floor_s"] = round(sum(_socket_copy_s(c, h, row["size_bytes"]) for h in ("h1", "h2")), 3)
            row["via_sockets_over_floor"] = round(row["via_sockets"]["to_shards_s"] / row["floor_s"], 2)
            out["sizes"][f"{mib}MiB"] = row
    out["load_avg_end"] = os.getloadavg()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
