"""The notebooks are stored clean, and kernel_ext/ really loads the magics.

The notebooks themselves are executed by ``pytest --nbval-lax notebooks/``
(see tests/support/notebook_clusters.py); these tests check what that does not.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL_EXT = ROOT / "kernel_ext"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.outputs or c.execution_count is not None)
    ]
    assert not dirty, (
        f"{path.name}: cells {dirty} have outputs or execution counts; clear them "
        "before committing (jupyter nbconvert --clear-output --inplace)"
    )


def test_quickstart_stops_its_cluster_last():
    nb = nbformat.read(ROOT / "notebooks" / "01_quickstart.ipynb", as_version=4)
    code = [c.source.strip() for c in nb.cells if c.cell_type == "code"]
    assert code[-1] == "%ray_cluster stop"


def _run_in_kernel(kernel_name: str, source: str) -> str:
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    NotebookClient(nb, timeout=60, kernel_name=kernel_name).execute()
    return "".join(o.get("text", "") for o in nb.cells[0].outputs)


@pytest.fixture
def jupyter_env(tmp_path, monkeypatch):
    """A Jupyter path and RAYNB_HOME of the test's own (no cluster runs in it)."""
    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "raynb_home"))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    return tmp_path


def test_kernelspec_loads_the_magics(jupyter_env):
    spec = json.loads((KERNEL_EXT / "kernelspec" / "raynb" / "kernel.json").read_text())
    assert spec["display_name"] == "Python 3 (raynb)"
    shutil.copytree(KERNEL_EXT / "kernelspec" / "raynb", jupyter_env / "jupyter" / "kernels" / "raynb")
    out = _run_in_kernel("raynb", "%ray_cluster status\nimport sys; print(sys.executable)")
    assert "no cluster running" in out
    assert out.strip().splitlines()[-1] == sys.executable  # "python" resolves to this interpreter


def test_ipython_kernel_config_loads_the_magics(jupyter_env):
    profile = jupyter_env / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    shutil.copy(KERNEL_EXT / "ipython_kernel_config.py", profile)
    assert "no cluster running" in _run_in_kernel("python3", "%ray_cluster status")
