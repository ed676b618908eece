"""The settings registry (raynb/cluster/settings.py): every RAYNB_* variable the code names
is declared there once, values parse or fall back, and the docs page is the generated one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from raynb.cluster import settings

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bRAYNB_[A-Z0-9_]*[A-Z0-9]\b")


def test_every_variable_the_code_names_is_declared():
    undeclared = {}
    for path in (ROOT / "raynb").rglob("*.py"):
        for name in NAME.findall(path.read_text()):
            if name not in settings.SETTINGS:
                undeclared.setdefault(name, str(path.relative_to(ROOT)))
    assert not undeclared, f"declare these in raynb/cluster/settings.py: {undeclared}"


def test_a_value_parses_and_a_bad_one_falls_back(monkeypatch):
    monkeypatch.setenv("RAYNB_NODE_TIMEOUT_S", "12.5")
    assert settings.get("RAYNB_NODE_TIMEOUT_S") == 12.5
    for bad in ("-1", "nan", "soon"):
        monkeypatch.setenv("RAYNB_NODE_TIMEOUT_S", bad)
        assert settings.get("RAYNB_NODE_TIMEOUT_S") == settings.SETTINGS["RAYNB_NODE_TIMEOUT_S"].default
    monkeypatch.delenv("RAYNB_NODE_TIMEOUT_S")
    assert settings.get("RAYNB_NODE_TIMEOUT_S") == 5.0
    monkeypatch.setenv("RAYNB_KEEP_CLUSTER", "1")
    assert settings.get("RAYNB_KEEP_CLUSTER") is True


def test_an_undeclared_name_is_a_key_error():
    with pytest.raises(KeyError):
        settings.get("RAYNB_NOT_A_SETTING")
