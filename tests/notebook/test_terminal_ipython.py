"""A ``%%ray_train`` cell in a terminal ``ipython`` (the text view): one FINISHED line per
run, the summary's, not a second ``FINISHED after`` line before it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CELL = """%%ray_train --workers 2 --epochs 3
for epoch in range(3):
    report({"epoch": epoch, "loss": 1.0 / (epoch + 1)})
"""


def test_a_run_in_terminal_ipython_prints_one_finished_line(warm, tmp_path):
    script = tmp_path / "cell.ipy"
    script.write_text(CELL)
    env = dict(os.environ, PYTHONPATH=str(ROOT), IPYTHONDIR=str(tmp_path / "ipython"))
    env.pop("RAYNB_PROGRESS", None)  # the view a terminal picks by itself
    r = subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "--colors=nocolor", "--ext=raynb", str(script)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=str(tmp_path),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    finished = [line for line in r.stdout.splitlines() if re.match(r"\[ray_train_\S+\] FINISHED", line)]
    assert len(finished) == 1 and " in " in finished[0] and "epochs done 3/3" in finished[0], r.stdout
