"""The documentation site builds with `mkdocs build --strict`: no broken link, no page left
out of the navigation, every docstring page renders; the README stays the front page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").exists()


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    missing = [p for p in pages if re.search(rf":\s*{re.escape(p)}\s*$", nav, re.M) is None]
    assert not missing, f"add these pages to mkdocs.yml's nav: {missing}"


def test_the_readme_is_a_front_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    assert "raynb demo" in blocks[0] and "pytest" in blocks[1], "the README opens with its two commands"
    ci = (ROOT / ".ci" / "run").read_text()
    assert blocks[1].strip() in ci, "CI runs the README's test command verbatim"
    pictures = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", readme)
    assert len(pictures) == 1 and (ROOT / pictures[0]).is_file(), f"one picture of the pane: {pictures}"


def test_the_generated_pages_are_current():
    from raynb.cluster import settings
    from raynb.cluster.protocol import reference as protocol_reference
    from raynb.notebook.magics import reference as magic_reference

    for page, text, command in (
        ("environment.md", settings.markdown(), "python -m raynb.cluster.settings --markdown"),
        ("magics.md", magic_reference.markdown(), "python -m raynb.notebook.magics.reference"),
        (
            "protocol.md",
            protocol_reference.markdown(),
            "python -m raynb.cluster.protocol.reference --markdown",
        ),
    ):
        assert (ROOT / "docs" / page).read_text() == text, f"docs/{page} is stale: {command} > docs/{page}"
