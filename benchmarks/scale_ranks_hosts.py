"""``scale_ranks.py --hosts``: the warm re-run with its ranks spread over several hosts.

For each host count H of ``--hosts``: network namespaces on this machine
(``tests/support/netns.py``, as ``benchmarks/multihost.py``): the head on its own host, H
hosts with a node agent each (as many warm workers as the largest size over H, rounded up)
and the client on another, CurveZMQ on every ZeroMQ link. At each size of ``--sizes`` (at
least H), ``placement_strategy="SPREAD"``: two runs first (the group forms), then ``--runs``
timed ``TorchTrainer.fit()`` calls of the trivial function (one all-reduce, one report),
submit -> Result, in ms. Needs root; without it the result says ``skipped`` and why.
"""

from __future__ import annotations

import math
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # tests.support, run as a script too
    sys.path.insert(0, str(ROOT))

CLIENT = """
import statistics
import torch, torch.distributed as dist
from raynb import RunConfig, ScalingConfig, TorchTrainer
from raynb.train import report
raynb.connect(KEY_FILE)
def loop():
    t = torch.tensor([float(dist.get_rank() + 1)]); dist.all_reduce(t); report({"sum": t.item()})
out = []
for n in SIZES:
    cfg = ScalingConfig(num_workers=n, placement_strategy="SPREAD")
    def fit():
        t0 = time.perf_counter()
        r = TorchTrainer(loop, scaling_config=cfg, run_config=RunConfig(verbose=0)).fit()
        assert r.metrics["sum"] == sum(range(1, n + 1)), r
        return (time.perf_counter() - t0) * 1e3
    first = fit(); fit()
    times = sorted(fit() for _ in range(RUNS))
    out.append({"ranks": n, "new_group_ms": round(first, 1), "median_ms": round(statistics.median(times), 2),
                "p90_ms": round(times[int(0.9 * (len(times) - 1))], 2), "min_ms": round(times[0], 2), "n": RUNS})
print(json.dumps({"sizes": out}))
"""


def over_hosts(sizes: list[int], host_counts: list[int], runs: int) -> dict:
    """``{"hosts": [{"hosts": H, "workers_per_host": W, "sizes": [...]}, ...]}``, or
    ``{"skipped": why}`` where namespaces cannot be made here."""
    from tests.support import netns
    from tests.support.multihost_fixture import hosts_up

    why = netns.available()
    if why:
        return {"skipped": why}
    out = []
    for h in host_counts:
        fit_sizes = [n for n in sizes if n >= h]
        if not fit_sizes:
            continue
        per_host = math.ceil(max(fit_sizes) / h)
        names = [f"h{i}" for i in range(1, h + 1)]
        nodes = tuple((name, f"n{i}", per_host) for i, name in enumerate(names, 1))
        base = Path(tempfile.mkdtemp(prefix="raynb-bench-ranks-hosts-"))
        try:
            with hosts_up(base, nodes, hosts=["head", *names, "client"]) as c:
                code = f"SIZES = {fit_sizes!r}\nRUNS = {runs}\n" + CLIENT
                res, _ = c.client(code, timeout=900)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        out.append({"hosts": h, "workers_per_host": per_host, "sizes": res["sizes"]})
    return {"hosts": out}
