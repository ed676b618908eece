"""The dashboard's Jupyter server extension after an editable install: the commands
``docs/dashboard.md`` gives enable it (``jupyter server extension list`` validates it
OK), where jupyter_server 2.x's ``jupyter server extension enable raynb`` alone enables
nothing. Run in a config directory of the test's own (``JUPYTER_CONFIG_DIR``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- enable-editable:"


def _documented_block() -> str:
    text = (ROOT / "docs" / "dashboard.md").read_text()
    after = text[text.index(MARKER) :]
    return re.search(r"```bash\n(.*?)```", after, re.S).group(1)


def _env(config: Path) -> dict:
    bindir = os.path.dirname(sys.executable)
    return dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(config),
        PATH=bindir + os.pathsep + os.environ["PATH"],
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    )


def _jupyter(config: Path, *args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "jupyter", "server", "extension", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(config),
        cwd=ROOT,
    )
    return re.sub(r"\x1b\[[0-9;]*m", "", r.stdout + r.stderr)  # no colours


def _listed(out: str, config: Path) -> str:
    """The lines ``extension list`` prints for ``config`` (the test's own directory)."""
    part = out.split(f"Config dir: {config}", 1)
    return part[1].split("Config dir:", 1)[0] if len(part) == 2 else ""


@pytest.mark.skipif(shutil.which("bash") is None, reason="the documented commands are bash")
def test_the_documented_commands_enable_the_dashboard_after_an_editable_install(tmp_path):
    config = tmp_path / "jupyter-config"
    config.mkdir()
    # jupyter_server's own command refuses a name no config lists yet (what the docs explain).
    out = _jupyter(config, "enable", "--user", "raynb")
    assert not (config / "jupyter_server_config.d" / "raynb.json").exists(), out
    r = subprocess.run(
        ["bash", "-ec", _documented_block()],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(config),
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    listed = _listed(_jupyter(config, "list"), config)
    assert re.search(r"raynb\s+enabled", listed) and re.search(r"raynb \S+ OK", listed), listed
    # From then on enable / disable switch it, as the docs say.
    out = _jupyter(config, "disable", "--user", "raynb")
    assert "Validation failed" not in out and re.search(
        r"raynb\s+disabled", _listed(_jupyter(config, "list"), config)
    ), out
    out = _jupyter(config, "enable", "--user", "raynb")
    assert "Validation failed" not in out and re.search(
        r"raynb\s+enabled", _listed(_jupyter(config, "list"), config)
    ), out
