"""raynb across hosts: network namespaces on this machine (``tests/support/netns.py``), a head on
198.18.0.1 and node agents n1 (4 workers) and n2 (2 workers) on .2 and .3, a notebook
client on .4, CurveZMQ on every ZeroMQ link. Prints one JSON object:

- ``warm_rerun_ms``: the trivial 4-rank run (one all-reduce, one report) re-run warm,
  ``two_hosts`` (SPREAD: 2 ranks on each) and ``one_host`` (PACK: 4 on n1), medians side
  by side, and their ratio (target: under 2);
- ``gradient_bytes_per_step``: bytes n1's eth0 sent per DDP step (its tx counter, in the
  namespace) of a 1M-parameter model, 2 ranks on each host, without and with
  ``gradient_compression="fp16"``, and the bytes saved;
- ``checkpoint_mb_s``: a 64 MiB checkpoint reported by a rank on n2 (a node without the
  run's storage: streamed to the head), against a plain TCP socket copy of as many bytes
  from n2's namespace to the head's, over the same veth;
- ``host_loss_to_first_report_s``: every process of n2's host killed mid-run to the first
  report of the attempt restarted on n1, from its latest checkpoint.

Needs root (namespaces). Usage: ``python -m benchmarks.multihost [--quick]``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from tests.support.multihost_fixture import Cluster, bench_args, hosts_up  # noqa: E402

TRIVIAL = """
import torch, torch.distributed as dist
from raynb import ScalingConfig, TorchTrainer
from raynb.train import report
raynb.connect(KEY_FILE)
def loop():
    t = torch.ones(1); dist.all_reduce(t); report({"sum": t.item()})
out = {}
for strategy, label in (("SPREAD", "two_hosts"), ("PACK", "one_host")):
    cfg = ScalingConfig(num_workers=4, placement_strategy=strategy)
    TorchTrainer(loop, scaling_config=cfg).fit()   # forms the group
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter(); TorchTrainer(loop, scaling_config=cfg).fit(); times.append(time.perf_counter() - t0)
    out[label] = times
print(json.dumps(out))
"""

GRADIENTS = """
import torch, torch.distributed as dist
from raynb import ScalingConfig, TorchTrainer
from raynb.train import get_context, report
from raynb.train.torch import prepare_model
raynb.connect(KEY_FILE)
def loop(config):
    model = prepare_model(torch.nn.Sequential(torch.nn.Linear(1000, 1000), torch.nn.Linear(1000, 24)),
                          gradient_compression=config["compression"])
    x = torch.randn(8, 1000)
    def tx():
        return int(open("/sys/class/net/eth0/statistics/tx_bytes").read())
    model(x).sum().backward(); dist.barrier()
    before = tx()
    for _ in range(config["steps"]):
        model(x).sum().backward()
    dist.barrier()
    sent = torch.tensor([float(tx() - before)])
    report({"tx_per_step": sent.item() / config["steps"],
            "params": sum(p.numel() for p in model.parameters())})
out = {}
for c in (None, "fp16"):
    r = TorchTrainer(loop, train_loop_config={"compression": c, "steps": STEPS},
                     scaling_config=ScalingConfig(num_workers=4, placement_strategy="SPREAD")).fit()
    out[c or "none"] = r.metrics["tx_per_step"]; out["params"] = r.metrics["params"]
print(json.dumps(out))
"""

CHECKPOINT = """
import tempfile
from raynb import Checkpoint, ScalingConfig, TorchTrainer
from raynb.train import report
raynb.connect(KEY_FILE)
def loop(config):
    times = []
    for i in range(config["n"]):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "blob.bin"), "wb") as f:
                f.write(os.urandom(config["mib"] << 20))
            t0 = time.perf_counter()
            report({"i": i}, checkpoint=Checkpoint.from_directory(d))
            times.append(time.perf_counter() - t0)
    report({"upload_s": sorted(times)[len(times) // 2]})
r = TorchTrainer(loop, train_loop_config={"n": N, "mib": MIB}, scaling_config=ScalingConfig(num_workers=1)).fit()
print(json.dumps({"upload_s": r.metrics["upload_s"]}))
"""

SOCKET_SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.18.0.1", 0)); s.listen(1); print(s.getsockname()[1], flush=True)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(1 << 20)
    if not b: break
    n += len(b)
c.sendall(b"ok"); print(n, flush=True)
"""

SOCKET_CLIENT = """
import os, socket, sys, time
data = os.urandom({mib} << 20)
t0 = time.perf_counter()
c = socket.create_connection(("198.18.0.1", {port}))
c.sendall(data); c.shutdown(socket.SHUT_WR); c.recv(2)
print(time.perf_counter() - t0)
"""


def _socket_copy_s(c: Cluster, mib: int) -> float:
    import subprocess

    server = c.net.popen("head", [sys.executable, "-c", SOCKET_SERVER], stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    r = c.net.run("h2", [sys.executable, "-c", SOCKET_CLIENT.format(mib=mib, port=port)])
    server.wait(timeout=60)
    return float(r.stdout.strip())


def _host_loss(c: Cluster) -> float:
    import subprocess

    from tests.support.multihost_fixture import LONG_RUN

    name = "bench-lose"
    code = f"EPOCHS, EPOCH_S, NAME = 10, 0.5, {name!r}\n" + textwrap.dedent(LONG_RUN)
    client = c.net.popen(
        "client",
        [sys.executable, "-c", c.client_prelude() + code],
        env=c.env("client"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run_dir = c.storage / name
    while not (run_dir / "checkpoint_000002").is_dir():
        if client.poll() is not None:
            raise RuntimeError(client.communicate())
        time.sleep(0.02)
    c.net.kill_all("h2")
    lost = time.monotonic()
    while True:
        rows = [json.loads(x) for x in (run_dir / "result.json").read_text().splitlines() if x.strip()]
        if any(r["start"] > 0 for r in rows):
            first = time.monotonic() - lost
            break
        time.sleep(0.02)
    client.communicate(timeout=120)
    return first


def main() -> int:
    args = bench_args()
    if args is None:
        return 0
    runs, steps, mib, n_ckpt = (5, 5, 16, 2) if args.quick else (20, 20, 64, 3)
    base = Path(tempfile.mkdtemp(prefix="raynb-bench-multihost-"))
    out: dict = {"load_avg_start": os.getloadavg()}
    with hosts_up(base, (("h1", "n1", 4), ("h2", "n2", 2)), remove_base=True) as c:
        net = c.net
        warm, _ = c.client(f"RUNS = {runs}\n" + TRIVIAL, timeout=600)
        two, one = statistics.median(warm["two_hosts"]) * 1e3, statistics.median(warm["one_host"]) * 1e3
        out["warm_rerun_ms"] = {
            "two_hosts": round(two, 1),
            "one_host": round(one, 1),
            "ratio": round(two / one, 2),
            "n": runs,
        }
        g, _ = c.client(f"STEPS = {steps}\n" + GRADIENTS, timeout=600)
        out["gradient_bytes_per_step"] = {
            "params": g["params"],
            "none": round(g["none"]),
            "fp16": round(g["fp16"]),
            "saved": round(g["none"] - g["fp16"]),
            "ratio": round(g["fp16"] / g["none"], 3),
        }
        # The checkpointing rank must be on n2: with h1's link down the head drops n1 (5 s
        # without a heartbeat), and n1 registers again when the link is back.
        net.link("h1", up=False)
        c.wait_workers(1, nodes={"n2"})
        time.sleep(6)  # the head drops n1
        ck, _ = c.client(f"N, MIB = {n_ckpt}, {mib}\n" + CHECKPOINT, timeout=600)
        net.link("h1", up=True)
        sock = _socket_copy_s(c, mib)
        out["checkpoint_mb_s"] = {
            "mib": mib,
            "raynb_stream": round(mib / ck["upload_s"], 1),
            "plain_socket": round(mib / sock, 1),
            "ratio": round(sock / ck["upload_s"], 2),
        }
        c.wait_workers(4, nodes={"n1"}, timeout=60)
        out["host_loss_to_first_report_s"] = round(_host_loss(c), 2)
    out["load_avg_end"] = os.getloadavg()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
