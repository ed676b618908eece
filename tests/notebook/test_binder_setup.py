"""What a Binder user meets: torch's own dependencies still come from PyPI (postBuild
adds PyTorch's CPU index, it does not replace PyPI), the example notebooks open on the
*Python 3 (raynb)* kernel that postBuild installs, their first cell
(``%load_ext raynb``) loads quietly on that kernel, and the notebooks' folder holds only
notebooks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from test_notebooks import KERNEL_EXT, NOTEBOOKS, ROOT, _run_in_kernel, jupyter_env  # noqa: F401


def test_postbuild_adds_the_pytorch_index_to_pypi():
    lines = [ln for ln in (ROOT / "binder" / "postBuild").read_text().splitlines() if "pip install" in ln]
    torch = [ln for ln in lines if "torch" in ln.split("-e")[0]]
    assert torch and all("--extra-index-url https://download.pytorch.org/whl/cpu" in ln for ln in torch), (
        torch
    )
    assert not any(" --index-url" in ln or " -i " in ln for ln in lines), lines
    assert all("torch==2.13.0+cpu" in ln for ln in torch), torch  # the CPU build, never PyPI's CUDA one


def test_notebooks_open_on_the_raynb_kernel_postbuild_installs():
    spec = json.loads((KERNEL_EXT / "kernelspec" / "raynb" / "kernel.json").read_text())
    assert (
        "jupyter kernelspec install --user kernel_ext/kernelspec/raynb"
        in (ROOT / "binder" / "postBuild").read_text()
    )
    for path in NOTEBOOKS:
        ks = nbformat.read(path, as_version=4).metadata.kernelspec
        assert (ks.name, ks.display_name) == ("raynb", spec["display_name"]), (path.name, ks)


def test_load_ext_in_the_raynb_kernel_says_nothing(jupyter_env):  # noqa: F811
    shutil.copytree(KERNEL_EXT / "kernelspec" / "raynb", jupyter_env / "jupyter" / "kernels" / "raynb")
    first_cells = {
        next(c.source for c in nbformat.read(p, as_version=4).cells if c.cell_type == "code").strip()
        for p in NOTEBOOKS
    }
    assert first_cells == {"%load_ext raynb"}, first_cells
    out = _run_in_kernel("raynb", "%ray_cluster status\n%load_ext raynb\n%ray_cluster status")
    assert out.count("no cluster running") == 2, out
    assert "already loaded" not in out and "reload_ext" not in out, out


def test_the_notebooks_folder_holds_only_notebooks():
    """Binder's file browser opens on ``notebooks/``: no ``__init__.py`` or ``conftest.py`` there
    (nbval's per-notebook cluster is ``tests/support/notebook_clusters.py``)."""
    tracked = subprocess.run(
        ["git", "ls-files", "notebooks"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if tracked.returncode != 0:
        pytest.skip(f"not a git checkout: {tracked.stderr.strip()}")
    names = [Path(p).name for p in tracked.stdout.split()]
    assert names and all(n.endswith(".ipynb") for n in names), names


def test_a_notebooks_only_run_loads_the_per_notebook_cluster_plugin(tmp_path):
    """``pytest --nbval-lax notebooks/`` from anywhere, not only README's command with tests/."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    cmd += ["--nbval-lax", "--trace-config", str(ROOT / "notebooks" / "01_quickstart.ipynb")]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "PLUGIN registered: <module 'tests.support.notebook_clusters'" in out.stdout, out.stdout[-2000:]
