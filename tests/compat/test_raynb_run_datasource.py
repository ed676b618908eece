"""A Ray Data script with its own ``Datasource`` and ``Datasink`` (imports as Ray's docs
write them: ``ray.data.datasource``, ``ray.data.block``) runs unchanged under ``raynb run``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """\
import pyarrow as pa
import ray
from ray.data.block import BlockAccessor, BlockMetadata
from ray.data.datasource import Datasink, Datasource, ReadTask


class Numbers(Datasource):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def estimate_inmemory_data_size(self):
        return self.n * 8

    def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
        step = -(-self.n // parallelism)
        return [
            ReadTask(lambda lo=lo: [pa.table({"x": list(range(lo, min(lo + step, self.n)))})],
                     BlockMetadata(num_rows=min(lo + step, self.n) - lo, size_bytes=None, exec_stats=None))
            for lo in range(0, self.n, step)
        ]


class Summing(Datasink):
    def write(self, blocks, ctx):
        return sum(sum(BlockAccessor.for_block(b).to_pandas()["x"]) for b in blocks)

    def on_write_complete(self, write_result):
        print("total", sum(write_result.write_returns), "rows", write_result.num_rows)


ds = ray.data.read_datasource(Numbers(10), override_num_blocks=3)
ds.map(lambda r: {"x": r["x"] * 2}).write_datasink(Summing())
"""


def test_a_ray_data_script_with_its_own_source_and_sink_runs_unchanged(tmp_path):
    script = tmp_path / "custom_io.py"
    script.write_text(textwrap.dedent(SCRIPT))
    proc = subprocess.run(
        [sys.executable, "-m", "raynb.cli", "run", str(script)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "total 90 rows 10" in proc.stdout
