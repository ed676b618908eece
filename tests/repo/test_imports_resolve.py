"""Every name the tree imports from raynb exists: a module that stops re-exporting a name
(a refactor, a linter's autofix) fails here, not at the first run that reaches the import."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import raynb

ROOT = Path(__file__).resolve().parents[2]


def _from_imports(path: Path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package[: len(package) - node.level + 1] + ([node.module] if node.module else [])
                )
            if base == "raynb" or base.startswith("raynb."):
                yield node.lineno, base, [a.name for a in node.names if a.name != "*"]


def _resolves(base: str, name: str) -> bool:
    if hasattr(importlib.import_module(base), name):
        return True
    try:
        importlib.import_module(f"{base}.{name}")
    except ImportError:
        return False
    return True


def test_every_raynb_module_imports():
    failed = []
    for info in pkgutil.walk_packages(raynb.__path__, "raynb."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as e:
            if "raynb" in str(e):  # an optional framework that is not installed is not this test's matter
                failed.append(f"{info.name}: {e}")
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("folder", ["raynb", "tests", "benchmarks", "tools"])
def test_every_name_imported_from_raynb_exists(folder):
    missing = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for line, base, names in _from_imports(path):
            try:
                missing += [
                    f"{path.relative_to(ROOT)}:{line}: {base}.{n}" for n in names if not _resolves(base, n)
                ]
            except ImportError as e:
                if "raynb" in str(e):
                    missing.append(f"{path.relative_to(ROOT)}:{line}: {base}: {e}")
    assert not missing, "names imported from raynb that do not exist:\n" + "\n".join(missing)
