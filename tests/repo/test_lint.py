"""The tree passes ruff as pyproject.toml configures it: lint (pycodestyle, pyflakes, import
order, line length 110) and format."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff")
    cmd = [exe] if exe else [sys.executable, "-m", "ruff"]
    return subprocess.run([*cmd, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module", autouse=True)
def _ruff_installed():
    pytest.importorskip("ruff")


def test_ruff_check_passes():
    r = _ruff("check", ".", "--output-format", "concise")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_ruff_format_leaves_the_tree_as_it_is():
    r = _ruff("format", "--check", ".")
    assert r.returncode == 0, "run `ruff format .`:\n" + r.stdout[-4000:] + r.stderr[-2000:]
