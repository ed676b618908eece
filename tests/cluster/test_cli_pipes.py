"""``raynb status | head``: the reader of the pipe goes away before raynb has written all
it had; raynb ends quietly with 141 (128 + SIGPIPE, as a command SIGPIPE killed), not
with a ``BrokenPipeError`` traceback on the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (head) is gone before the first write
    try:
        return subprocess.run(
            [sys.executable, "-m", "raynb.cli", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=str(ROOT),
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
    finally:
        os.close(write_end)


def test_status_into_a_closed_pipe_ends_quietly(cluster):
    r = _into_a_closed_pipe("status")
    assert r.returncode == 141, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr, r.stderr


def test_status_piped_into_head_prints_its_first_line_and_nothing_on_stderr(cluster):
    r = subprocess.run(
        f"{sys.executable} -m raynb.cli status | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert r.stdout.startswith("head ") and r.stdout.count("\n") == 1, r.stdout
    assert r.stderr == "", r.stderr
