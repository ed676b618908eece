"""`raynb run` on a script importing names raynb does not serve: a missing name of a served
module (`from ray.data.datasource import PathPartitionFilter`), Ray Train v2's internal
modules, Ray's `_internal` packages. Each error names what is not served and what to use
(was, for a name: "cannot import name ... (unknown location)")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import ray

for stmt in STATEMENTS:
    try:
        exec(stmt)
        print("IMPORTED|" + stmt)
    except ImportError as e:
        print("REFUSED|" + stmt + "|" + str(e).replace("\\n", " "))
"""

STATEMENTS = [
    "from ray.data.datasource import PathPartitionFilter",
    "from ray.train.torch import no_such_name",
    "from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer",
    "import ray.data._internal.execution",
    "from ray.data.datasource import Datasource, FileBasedDatasource",
    "from ray.train import get_all_reported_checkpoints, UserCallback",
]


def test_each_unserved_import_names_itself_and_what_to_use(tmp_path):
    script = tmp_path / "imports.py"
    script.write_text(f"STATEMENTS = {STATEMENTS!r}\n" + textwrap.dedent(SCRIPT))
    proc = subprocess.run(
        [sys.executable, "-m", "raynb.cli", "run", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    said = {ln.split("|")[1]: ln.split("|", 2) for ln in proc.stdout.splitlines() if "|" in ln}
    assert set(said) == set(STATEMENTS), proc.stdout + proc.stderr

    def refusal(stmt: str) -> str:
        kind, _, message = said[stmt]
        assert kind == "REFUSED", (stmt, said[stmt])
        assert "not served by raynb" in message and "coming-from-ray.md" in message, message
        return message

    assert "`ray.data.datasource.PathPartitionFilter` is not served" in refusal(STATEMENTS[0])
    assert "`ray.train.torch.no_such_name` is not served" in refusal(STATEMENTS[1])
    assert "from `ray.train` (`from ray.train import RunConfig" in refusal(STATEMENTS[2])
    assert "`ray.data._internal` is Ray's internals: use the public names of `ray.data`" in refusal(
        STATEMENTS[3]
    )
    assert said[STATEMENTS[4]][0] == "IMPORTED" and said[STATEMENTS[5]][0] == "IMPORTED"
