"""Ray Tune's own example scripts, shipped in the ``ray`` wheel, run on raynb with their
imports changed only (``ray`` -> ``raynb``), with ``--smoke-test`` as Ray's CI runs them.
The scripts are read from the installed wheel (nothing of Ray's is copied here)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.find_spec("ray")
EXAMPLES = Path(SPEC.origin).parent / "tune" / "examples" if SPEC and SPEC.origin else None

pytestmark = pytest.mark.skipif(
    EXAMPLES is None or not EXAMPLES.is_dir(), reason="Ray's wheel (its tune/examples) is not installed"
)


def ported(source: str) -> str:
    """``source`` with Ray's imports pointed at raynb, and nothing else changed."""
    source = re.sub(r"^(\s*)import ray$", r"\1import raynb as ray", source, flags=re.M)
    source = re.sub(r"^(\s*)from ray(\.| )", r"\1from raynb\2", source, flags=re.M)
    return re.sub(r"^(\s*)import ray\.", r"\1import raynb.", source, flags=re.M)


# The last line each prints, as Ray's does.
SCRIPTS = {
    "tune_basic_example.py": "Best hyperparameters found were:",
    "async_hyperband_example.py": "Best hyperparameters found:",
    "custom_func_checkpointing.py": "Best checkpoint:",
    "hyperband_function_example.py": "Best hyperparameters found were:",
    "xgboost_example.py": "Best model parameters:",
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_ray_example_runs_with_imports_changed(cluster, tmp_path, name):
    script = tmp_path / name
    script.write_text(ported((EXAMPLES / name).read_text()))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAYNB_PROGRESS": "text"}
    out = subprocess.run(
        [sys.executable, str(script), "--smoke-test"],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, f"{name} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    assert SCRIPTS[name] in out.stdout, out.stdout[-2000:]
