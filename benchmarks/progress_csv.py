"""What writing ``progress.csv`` costs the head when every report brings a new metric
(``report({f"loss_{epoch}": ...})``). Prints one JSON object.

The head's own ``RunDirectory`` (in a temporary directory, no cluster): ``--reports``
rank-0 reports, each with one new key, written in the head's batches (a ``flush`` every
10 reports, as its 0.1 s tick at 100 reports/s), then ``close`` (the run's end). Side by
side, in turn, ``--rounds`` times:

- ``bounded``: raynb's policy (``cluster.progress_table``: a rewrite at most once every
  ``REWRITE_EVERY_S`` and ``REWRITE_GAP_FACTOR`` times its own duration, new columns only while the table holds ``MAX_REWRITE_CELLS``);
- ``every_flush``: the policy before it: the whole file rewritten at every flush that
  brought a new metric.

Keys, per policy (medians over the rounds): ``total_s`` (CPU time of the writes),
``worst_write_ms`` (the longest single flush or close: how long the head's thread was
held), ``rewrites``, ``columns``; ``ratio_total`` (every_flush / bounded); ``machine``.

Usage::

    python -m benchmarks.progress_csv              # 3 rounds of 2,000 reports
    python -m benchmarks.progress_csv --quick      # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

from benchmarks._common import machine_info  # noqa: E402
from raynb.cluster.storage import progress_table  # noqa: E402
from raynb.cluster.storage.rundir import RunDirectory  # noqa: E402

SETTINGS = ("REWRITE_EVERY_S", "REWRITE_GAP_FACTOR", "MAX_REWRITE_CELLS")
POLICIES = {
    "bounded": tuple(getattr(progress_table, k) for k in SETTINGS),
    "every_flush": (0.0, 0, float("inf")),
}


def _set(values) -> None:
    for k, v in zip(SETTINGS, values):
        setattr(progress_table, k, v)


def one_run(reports: int, policy: str) -> dict:
    _set(POLICIES[policy])
    rewrites = [0]
    real = progress_table.ProgressTable._rewrite

    def counted(self, rows):
        rewrites[0] += 1
        real(self, rows)

    progress_table.ProgressTable._rewrite = counted
    root = tempfile.mkdtemp(prefix="raynb-progress-bench-")
    try:
        rd = RunDirectory(root, "run")
        rd.prepare_files()
        total = worst = 0.0
        for i in range(reports):
            rd.append_result({"loss": 1.0 / (i + 1), f"loss_{i}": float(i)}, None, None)
            if i % 10 == 9 or i == reports - 1:
                t0 = time.process_time()
                (rd.flush if i < reports - 1 else rd.close)()
                took = time.process_time() - t0
                total, worst = total + took, max(worst, took)
        return {
            "total_s": total,
            "worst_write_ms": worst * 1e3,
            "rewrites": rewrites[0],
            "columns": len(rd._progress.columns),
        }
    finally:
        progress_table.ProgressTable._rewrite = real
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="200 reports, 1 round")
    args = ap.parse_args()
    if args.quick:
        args.reports, args.rounds = 200, 1
    load_at_start = round(os.getloadavg()[0], 2)
    runs: dict[str, list[dict]] = {p: [] for p in POLICIES}
    try:
        for _ in range(args.rounds):
            for policy in POLICIES:  # in turn, so both see the same load
                runs[policy].append(one_run(args.reports, policy))
    finally:
        _set(POLICIES["bounded"])
    out: dict = {"reports": args.reports, "rounds": args.rounds}
    for policy, rs in runs.items():
        out[policy] = {k: round(statistics.median(r[k] for r in rs), 4) for k in rs[0]}
    out["ratio_total"] = round(out["every_flush"]["total_s"] / max(out["bounded"]["total_s"], 1e-9), 1)
    out["machine"] = machine_info(load_at_start, load_avg_1m_at_end=round(os.getloadavg()[0], 2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
