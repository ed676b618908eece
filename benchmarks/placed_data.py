"""The cost of writing a run's in-memory data only to the nodes its ranks are placed on.

Since the head holds a placed attempt until its client has written the data to the
nodes that lack it (``data_needed`` / ``data_ready``, ``cluster/head/data_gate.py``), a
run with a dataset makes one more round trip between client and head before its ranks
start; a run without data makes none. This times, on a private one-node cluster (its
own temporary ``RAYNB_HOME`` and ``RAYNB_STORAGE_PATH``, stopped at the end), ``--runs``
warm one-rank ``TorchTrainer.fit()`` calls of each kind, interleaved, after 3 of each to
warm up:

- ``no_data_fit_s``: a function that reports one metric.
- ``data_fit_s``: the same with ``datasets={"train": from_numpy(...)}`` of ``--mib`` MiB
  (the rank reads one batch of it).
- ``data_needed_s``: where the code has the hook (this change), the median time the client
  spent answering ``data_needed`` (writing the segment and sending ``data_ready``); None
  when the head never asked: one node agent on this host is written while pickling
  (``shared_data["written"]``). ``RAYNB_DATA_VIA_SOCKET=1`` makes the local agent take
  the data on its socket, as another host's would, and so every first attempt asks.

Medians in seconds, with the load average before and after. Run it once per code base
to compare (``RAYNB_CODE=/path/to/other/checkout python -m benchmarks.placed_data``
puts that checkout first on ``sys.path``).

Usage::

    python -m benchmarks.placed_data            # 30 runs of each kind (~1 min)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

if os.environ.get("RAYNB_CODE"):  # another checkout's raynb, measured by this script
    sys.path.insert(0, os.environ["RAYNB_CODE"])


def _plain():
    from raynb.train import report

    report({"ok": 1})


def _reads():
    import raynb.train as rt

    next(iter(rt.get_dataset_shard("train").iter_batches(batch_size=8)))
    rt.report({"ok": 1})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--mib", type=float, default=1.0)
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="raynb-bench-placed-")
    os.environ["RAYNB_HOME"] = os.path.join(tmp, "home")
    os.environ["RAYNB_STORAGE_PATH"] = os.path.join(tmp, "storage")
    import numpy as np

    import raynb
    import raynb.data as rd
    from raynb.cluster.launch import start_cluster, stop_cluster
    from raynb.cluster.protocol import control, messages
    from raynb.train import RunConfig, ScalingConfig
    from raynb.train.torch import TorchTrainer

    hook_s: list[float] = []
    # the client's handler table (older trees: control.MESSAGE_HOOKS)
    table = getattr(control, "MESSAGE_HOOKS", None) or getattr(control.Client, "handlers", {})
    hook = table.get(getattr(messages, "DATA_NEEDED", None))
    if hook is not None:

        def timed(client, msg):
            t0 = time.perf_counter()
            hook(client, msg)
            hook_s.append(time.perf_counter() - t0)

        table[messages.DATA_NEEDED] = timed
    load_before = os.getloadavg()
    start_cluster(num_workers=1)
    out: dict = {}
    try:
        raynb.connect()
        ds = rd.from_numpy({"x": np.zeros((int(args.mib * (1 << 20)) // 256, 64), np.float32)})
        quiet, one = RunConfig(verbose=0), ScalingConfig(num_workers=1)
        times: dict[str, list] = {"no_data_fit_s": [], "data_fit_s": []}
        for i in range(args.runs + 3):
            for name, fn, kw in (
                ("no_data_fit_s", _plain, {}),
                ("data_fit_s", _reads, {"datasets": {"train": ds}}),
            ):
                t0 = time.perf_counter()
                TorchTrainer(fn, scaling_config=one, run_config=quiet, **kw).fit()
                if i >= 3:
                    times[name].append(time.perf_counter() - t0)
        hook_s = hook_s[3:]
        out = {k: round(statistics.median(v), 5) for k, v in times.items()}
        out["data_minus_no_data_s"] = round(out["data_fit_s"] - out["no_data_fit_s"], 5)
        out["data_needed_s"] = round(statistics.median(hook_s), 5) if hook_s else None
        out.update(
            runs=args.runs,
            mib=args.mib,
            code=os.path.dirname(raynb.__file__),
            load_before=[round(x, 2) for x in load_before],
            load_after=[round(x, 2) for x in os.getloadavg()],
        )
    finally:
        raynb.disconnect()
        stop_cluster()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
