"""docs/many-machines.md: every `raynb` command in its shell blocks is one the CLI takes, the
head-only start is shown where the head's machine must not train, and a notebook's connect
is one line whose arguments `raynb.connect` takes."""

from __future__ import annotations

import inspect
import re
import shlex
from pathlib import Path

import raynb
from raynb.cli import build_parser

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "many-machines.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", GUIDE.read_text(), flags=re.S)


def _commands() -> list[list[str]]:
    """The `host$ raynb ...` lines of the shell blocks, as argv (without `raynb`)."""
    out = []
    for block in _blocks("bash"):
        for line in block.splitlines():
            m = re.match(r"^\S+\$ raynb (.*)$", line)
            if m:
                out.append(shlex.split(m.group(1)))
    return out


def test_every_raynb_command_in_the_guide_parses():
    commands = _commands()
    assert [c[0] for c in commands].count("node") >= 1, commands
    parser = build_parser()
    for argv in commands:
        parser.parse_args(argv)  # SystemExit (a usage error) fails the test


def test_the_head_only_start_and_one_connect_line():
    starts = [c for c in _commands() if c[0] == "start"]
    assert any("--head-only" in c and "--host" in c for c in starts), starts
    text = GUIDE.read_text()
    assert text.count("raynb.connect(") == 1, "one client connect line"
    (line,) = [x for b in _blocks("python") for x in b.splitlines() if "raynb.connect(" in x]
    keywords = re.findall(r"(\w+)=", line)
    params = inspect.signature(raynb.connect).parameters
    assert keywords and all(k in params for k in keywords), (keywords, list(params))
