"""How long the head takes to answer `raynb status` while a dashboard polls a huge run's
record (400,000 reports, 1,000,000 output lines, written into a real run's directory),
as JSON: the dashboard's poll time and the status latencies (median, max).

    PYTHONPATH=<tree> python -m benchmarks.head_loop_budget

Runs a 1-worker cluster of its own in temporary directories, removed after.
"""

import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

home, store = tempfile.mkdtemp(), tempfile.mkdtemp()
os.environ.update(RAYNB_HOME=home, RAYNB_STORAGE_PATH=store, RAYNB_PROGRESS="text")
import raynb
from raynb.cluster.launch import start_cluster, stop_cluster
from raynb.cluster.protocol import messages
from raynb.cluster.protocol.control import Client
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer


def one(config):
    raynb.train.report({"loss": 1.0})


info, _ = start_cluster(num_workers=1)
try:
    raynb.connect()
    r = TorchTrainer(
        one, scaling_config=ScalingConfig(num_workers=1), run_config=RunConfig(name="huge", verbose=0)
    ).fit()
    p = Path(r.path)
    row = json.loads((p / "result.json").read_text().splitlines()[0])
    with open(p / "result.json", "w") as f:
        for i in range(400_000):
            row["training_iteration"] = i + 1
            f.write(json.dumps(row) + "\n")
    with open(p / "output.log", "w") as f:
        f.writelines(f"(rank 0) line {i}\n" for i in range(1_000_000))
    from raynb.notebook.dashboard.gateway import ClusterGateway

    gw = ClusterGateway(timeout=60)
    polls, stop = [], False

    def poll():
        while not stop:
            t = time.perf_counter()
            gw.record("huge")
            polls.append(time.perf_counter() - t)

    th = threading.Thread(target=poll)
    th.start()
    c = Client(info["address"], info["key"].encode(), info)
    lat = []
    end = time.monotonic() + 15
    while time.monotonic() < end:
        t = time.perf_counter()
        c.request(messages.STATUS_REQUEST, {}, reply_types=(messages.STATUS_REPLY,), timeout=60)
        lat.append(time.perf_counter() - t)
        time.sleep(0.05)
    stop = True
    th.join()
    lat.sort()
    print(
        json.dumps(
            {
                "tree": raynb.__file__,
                "dashboard_poll_s_median": sorted(polls)[len(polls) // 2],
                "polls": len(polls),
                "status_ms_median": 1000 * lat[len(lat) // 2],
                "status_ms_max": 1000 * lat[-1],
                "status_n": len(lat),
                "loadavg": open("/proc/loadavg").read().split()[:3],
            }
        )
    )
    c.close()
finally:
    raynb.disconnect()
    stop_cluster()
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)
