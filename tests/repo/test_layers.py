"""The package's layering, import cycles and module size, read from the source.

raynb is layered so that the long-lived processes (cluster) never load the notebook
side, and each layer only sees the ones below it:

    errors  <-  cluster  <-  client  <-  train  <-  tune  <-  notebook  <-  entry modules
                                     (data, integrations: beside train/tune)

Nothing here imports raynb or starts a process: every ``.py`` under ``raynb/`` is
parsed with ``ast``, so the module runs in milliseconds and still works while the
tree is half-moved. A lazy import inside a function is still a dependency and is
counted; only imports under ``if TYPE_CHECKING:`` are skipped.
"""

from __future__ import annotations

import ast
import functools
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = "raynb"
PKG_DIR = ROOT / PKG

# What each layer may import, by the first name after ``raynb.``. The order is the
# order the rule is written in a failure message. A layer's own name is listed when
# its modules may import each other; errors is the leaf everyone shares.
ALLOWED: dict[str, tuple[str, ...]] = {
    "errors": (),
    "cluster": ("cluster", "errors"),
    "client": ("cluster", "client", "errors"),
    "train": ("cluster", "client", "data", "train", "errors"),
    "tune": ("cluster", "client", "data", "train", "tune", "errors"),
    "data": ("cluster", "client", "data", "errors"),
    "integrations": ("cluster", "client", "data", "train", "tune", "integrations", "errors"),
    "notebook": ("cluster", "client", "train", "tune", "data", "integrations", "notebook", "errors"),
    # Ray AIR's module paths (raynb.air.config, .session, .integrations): names of the layers below
    "air": ("cluster", "client", "data", "train", "tune", "integrations", "air", "errors"),
    # Ray's module names served by raynb (`raynb run`, raynb.compat.install()).
    "compat": ("cluster", "client", "train", "tune", "data", "integrations", "air", "compat", "errors"),
}
# Top-level entry modules may import anything, and no layer may import them. The
# package itself (raynb/__init__.py, module name "raynb") is an entry module too:
# ``from raynb import X`` inside a layer reaches up through the public facade.
ENTRY_MODULES = ("cli", "demo", "__main__")

# Inside cluster/, packages follow the processes (DESIGN.md): what each may import, by the
# name after ``raynb.cluster.``; the modules directly in cluster/ are "shared".
CLUSTER_ALLOWED: dict[str, tuple[str, ...]] = {
    "shared": ("shared",),
    "protocol": ("shared", "protocol"),
    "storage": ("shared", "protocol", "storage"),
    "head": ("shared", "protocol", "storage", "head"),
    "node": ("shared", "protocol", "storage", "node", "worker"),  # the zygote runs a worker's main
    "worker": ("shared", "protocol", "storage", "worker"),
    "launch": ("shared", "protocol", "storage", "head", "node", "worker", "launch"),
}

MODULE_WARN_LINES = 800  # past this a module is worth a look (a warning, not a failure)
MAX_FUNCTION_LINES = 60
# Functions allowed over MAX_FUNCTION_LINES, as {"raynb/path.py:name": "why it stays long"}.
LONG_FUNCTION_EXEMPTIONS: dict[str, str] = {
    "raynb/data/dataset.py:map_batches": "Ray's map_batches arguments, each checked in turn",
    "raynb/train/tracking.py:setup_mlflow": "Ray's setup_mlflow arguments, each checked in turn",
    "raynb/train/batch_inference.py:map_batches_on_workers": (
        "Ray's map_batches arguments and their docstring; the body is the checks, one run, the read"
    ),
}


# -- scanning ------------------------------------------------------------------------
@dataclass(frozen=True)
class Import:
    """One raynb module an import statement depends on."""

    target: str  # the resolved module, e.g. "raynb.cluster.protocol" or "raynb"
    line: int
    statement: str  # as written, with the names that resolve to target: "from .. import x"


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def scan_source(source: str, module: str, is_package: bool, known: set[str]) -> list[Import]:
    """The raynb imports of one module's source, resolved to module names.

    ``module`` is the module's dotted name and ``is_package`` says it is an
    ``__init__.py`` (its own package for relative imports). ``known`` holds every
    module and package in the tree: ``from pkg import name`` is an import of
    ``pkg.name`` when that is a module or package, else of ``pkg`` itself (a name
    defined in ``pkg/__init__.py``). Taking ``known`` as an argument keeps the
    resolver testable on synthetic strings without files.
    """
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: list[Import] = []

    def base_of(node: ast.ImportFrom) -> str:
        if node.level == 0:
            return node.module or ""
        if node.level - 1 >= len(package):
            raise ValueError(f"{module} line {node.lineno}: relative import beyond the top-level package")
        parts = package[: len(package) - (node.level - 1)]
        return ".".join(parts + ([node.module] if node.module else []))

    def ours(name: str) -> bool:
        return name == PKG or name.startswith(PKG + ".")

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            # Skip only the TYPE_CHECKING body: its else branch runs for real.
            if not _is_type_checking(node.test):
                self.visit(node.test)
                for stmt in node.body:
                    self.visit(stmt)
            for stmt in node.orelse:
                self.visit(stmt)

        def visit_Import(self, node: ast.Import) -> None:
            for alias in node.names:
                if ours(alias.name):
                    found.append(Import(alias.name, node.lineno, f"import {alias.name}"))

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            base = base_of(node)
            if not ours(base):
                return
            written = "." * node.level + (node.module or "")
            by_target: dict[str, list[str]] = {}  # one Import per target, names kept in order
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if alias.name != "*" and sub in known else base
                by_target.setdefault(target, []).append(alias.name)
            for target, names in by_target.items():
                found.append(Import(target, node.lineno, f"from {written} import {', '.join(names)}"))

    Visitor().visit(ast.parse(source, filename=module))
    return found


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _discover() -> dict[str, Path]:
    """Every module of the tree on disk, by dotted name (``__init__`` as its package)."""
    return {_module_name(p): p for p in sorted(PKG_DIR.rglob("*.py")) if "__pycache__" not in p.parts}


MODULES = _discover()


@functools.lru_cache(maxsize=None)
def scan_tree() -> dict[str, list[Import]]:
    """Each real module's raynb imports. Directories count as packages even without
    an ``__init__.py`` (namespace packages, as the tree has mid-move), so
    ``from .. import cluster`` is the cluster package, not a name of raynb."""
    known = set(MODULES) | {PKG}
    for path in MODULES.values():
        for parent in path.relative_to(ROOT).parents[:-1]:
            known.add(".".join(parent.parts))
    return {
        mod: scan_source(path.read_text(encoding="utf-8"), mod, path.name == "__init__.py", known)
        for mod, path in MODULES.items()
    }


# -- rules ---------------------------------------------------------------------------
def layer_of(module: str) -> str | None:
    """The layer a module belongs to: a key of ALLOWED, "entry", or None for a
    top-level module that is in no layer (a leftover, or a stale import's target)."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ENTRY_MODULES:
        return "entry"
    return parts[1] if parts[1] in ALLOWED else None


def cluster_part(module: str) -> str | None:
    """The cluster sub-layer of a module (a key of CLUSTER_ALLOWED), None outside cluster/."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] != "cluster":
        return None
    if len(parts) == 2:
        return "shared"
    return parts[2] if parts[2] in CLUSTER_ALLOWED else "shared"


def cluster_violations(relpath: str, module: str, imports: list[Import]) -> list[str]:
    """Imports against the cluster sub-layer rule, and of cluster.head from outside cluster/."""
    mine = cluster_part(module)
    problems = []
    for imp in imports:
        theirs = cluster_part(imp.target)
        if theirs is None:
            continue
        if mine is None and theirs == "head":
            problems.append(
                f"{relpath} imports {imp.target}: nothing outside cluster/ imports the head "
                f"[line {imp.line}: {imp.statement}]"
            )
        elif mine is not None and theirs not in CLUSTER_ALLOWED[mine]:
            problems.append(
                f"{relpath} imports {imp.target}: cluster/{mine} may import only "
                f"{', '.join(CLUSTER_ALLOWED[mine])} [line {imp.line}: {imp.statement}]"
            )
    return problems


def rule_text(layer: str) -> str:
    allowed = ALLOWED[layer]
    if not allowed:
        return f"{layer} may import nothing from {PKG}"
    return f"{layer} may import only {', '.join(allowed)}"


def layer_violations(relpath: str, module: str, imports: list[Import], existing: set[str]) -> list[str]:
    """One readable line per forbidden import of ``module``."""
    layer = layer_of(module)
    if layer == "entry":
        return []
    if layer is None:
        return [
            f"{relpath} is in no layer: move it under one of {', '.join(ALLOWED)} or make it an entry module"
        ]
    problems = []
    for imp in imports:
        if layer_of(imp.target) in ALLOWED[layer]:
            continue
        if imp.target == PKG:
            why = f"a name of {PKG}/__init__.py"
        elif layer_of(imp.target) == "entry":
            why = "an entry module"
        elif imp.target not in existing:
            why = "no such module"
        else:
            why = "a module in no layer"
        problems.append(
            f"{relpath} imports {imp.target}: {rule_text(layer)}  [line {imp.line}: {imp.statement}; {why}]"
        )
    return problems


def import_graph(imports: dict[str, list[Import]]) -> dict[str, set[str]]:
    """Module -> the real modules it imports explicitly. Importing ``raynb.x.y`` also
    runs ``raynb/x/__init__.py``, but that implicit edge is left out on purpose; a
    module importing a name from itself (``from . import x`` in an ``__init__``) is
    no cycle either."""
    return {
        mod: {i.target for i in imps if i.target in imports and i.target != mod}
        for mod, imps in imports.items()
    }


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm; recursive, which is fine for a tree of a hundred modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def find_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Readable cycles ``a -> b -> a``: for every module in a cycle, the shortest one
    through it (so each module of each tangle shows up, without listing the
    exponentially many cycles a big tangle has), each written from its least module."""
    cycles: set[tuple[str, ...]] = set()
    for component in strongly_connected(graph):
        if len(component) < 2:
            continue
        inside = set(component)
        for start in component:
            # BFS from start's successors back to start, staying inside the component.
            parent: dict[str, str] = {}
            queue = deque()
            for w in sorted(graph[start] & inside):
                parent.setdefault(w, start)
                queue.append(w)
            while queue:
                v = queue.popleft()
                if v == start:
                    break
                for w in sorted(graph[v] & inside):
                    if w not in parent:
                        parent[w] = v
                        queue.append(w)
            path = [start]
            v = parent[start]
            while v != start:
                path.append(v)
                v = parent[v]
            path.reverse()  # start -> ... -> (back to start)
            path = [start] + path[:-1]
            least = path.index(min(path))
            cycles.add(tuple(path[least:] + path[:least]))
    return [" -> ".join(c + (c[0],)) for c in sorted(cycles)]


# -- the tree ------------------------------------------------------------------------
LAYERED = sorted(mod for mod in MODULES if layer_of(mod) != "entry")


def _relpath(module: str) -> str:
    return MODULES[module].relative_to(ROOT).as_posix()


@pytest.mark.parametrize("module", LAYERED, ids=[_relpath(m) for m in LAYERED])
def test_layer_imports(module):
    problems = layer_violations(_relpath(module), module, scan_tree()[module], set(MODULES))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("module", LAYERED, ids=[_relpath(m) for m in LAYERED])
def test_cluster_sublayer_imports(module):
    problems = cluster_violations(_relpath(module), module, scan_tree()[module])
    assert not problems, "\n".join(problems)


def test_no_import_cycles():
    cycles = find_cycles(import_graph(scan_tree()))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_every_import_resolves():
    """An import of a raynb module that does not exist (a leftover of a move) adds no
    edge to the graph above, so it could hide a cycle or a layer violation: name it."""
    known = set(MODULES) | {PKG}
    missing = [
        f"{_relpath(mod)}:{imp.line}: {imp.statement} -> {imp.target} does not exist"
        for mod, imports in scan_tree().items()
        for imp in imports
        if imp.target not in known
    ]
    assert not missing, "\n".join(missing)


def test_module_length():
    """A long module is a hint, not a fault: one concern may need room (a warning)."""
    import warnings

    for m, path in MODULES.items():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MODULE_WARN_LINES:
            warnings.warn(f"{_relpath(m)} has {n} lines: does it hold one concern?", stacklevel=1)


def long_functions() -> dict[str, int]:
    """Every function (and method) over MAX_FUNCTION_LINES, as {"path:name": lines}."""
    found = {}
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    found[f"{_relpath(m)}:{node.name}"] = n
    return found


def test_function_length():
    found = long_functions()
    offenders = [f"{k}: {n} lines" for k, n in sorted(found.items()) if k not in LONG_FUNCTION_EXEMPTIONS]
    stale = [f"{k}: exempted, but no longer over the cap" for k in LONG_FUNCTION_EXEMPTIONS if k not in found]
    assert not offenders + stale, (
        f"functions over {MAX_FUNCTION_LINES} lines (split them by what they do, "
        f"or list them in LONG_FUNCTION_EXEMPTIONS with a reason):\n" + "\n".join(offenders + stale)
    )


# Where the tests live: folders named for what they test (CONTRIBUTING.md, "Running the tests").
TEST_FOLDERS = {"client", "cluster", "compat", "data", "multihost", "notebook", "repo", "train", "tune"}


def test_tests_live_in_folders_named_for_what_they_test():
    tests = ROOT / "tests"
    loose = sorted(p.name for p in tests.glob("test_*.py"))
    assert not loose, f"test files at tests/'s top: {loose}; move each into the folder of what it tests"
    unknown = sorted(
        p.name for p in tests.iterdir() if p.is_dir() and p.name not in TEST_FOLDERS | {"support"}
    )
    assert not [u for u in unknown if not u.startswith((".", "__"))], (
        f"folders under tests/ not named in TEST_FOLDERS: {unknown} (add it there and in CONTRIBUTING.md)"
    )
    names = [p.name for p in tests.rglob("test_*.py")]
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, f"test files of one name in two folders (pytest imports both as one module): {twice}"
    # A folder under cluster/ is one of the cluster's packages.
    packages = {p.name for p in (ROOT / "raynb" / "cluster").iterdir() if (p / "__init__.py").exists()}
    extra = {
        p.name for p in (tests / "cluster").iterdir() if p.is_dir() and not p.name.startswith("__")
    } - packages
    assert not extra, f"tests/cluster/ folders that are no package of raynb/cluster: {sorted(extra)}"


# -- the scanner itself, so a bug in it cannot make the tests above pass vacuously ---
KNOWN = {
    "raynb",
    "raynb.errors",
    "raynb.cluster",
    "raynb.cluster.worker",
    "raynb.cluster.protocol",
    "raynb.client",
    "raynb.train",
    "raynb.train.session",
    "raynb.train.config",
    "raynb.tune",
}


def targets(source: str, module: str = "raynb.cluster.worker", is_package: bool = False):
    return [i.target for i in scan_source(source, module, is_package, KNOWN)]


def test_scanner_resolves_relative_submodule_and_reports_it():
    imports = scan_source("from ..train import session\n", "raynb.cluster.worker", False, KNOWN)
    assert [i.target for i in imports] == ["raynb.train.session"]
    [problem] = layer_violations("raynb/cluster/worker.py", "raynb.cluster.worker", imports, KNOWN)
    assert problem.startswith(
        "raynb/cluster/worker.py imports raynb.train.session: cluster may import only cluster, errors"
    )


def test_scanner_skips_type_checking_only():
    source = (
        "from typing import TYPE_CHECKING\n"
        "import typing\n"
        "if TYPE_CHECKING:\n"
        "    from ..train import session\n"
        "else:\n"
        "    from . import protocol\n"
        "if typing.TYPE_CHECKING:\n"
        "    import raynb.tune\n"
        "def lazy():\n"
        "    from ..errors import RunError\n"
    )
    assert targets(source) == ["raynb.cluster.protocol", "raynb.errors"]


def test_scanner_resolves_names_packages_and_absolute_imports():
    source = (
        "import os, raynb\n"
        "import raynb.train.session as s\n"
        "from . import session, report\n"
        "from .config import RunConfig\n"
        "from .. import connect\n"
        "from ..cluster import protocol as P\n"
        "from raynb.tune import *\n"
        "from os.path import join\n"
    )
    # An __init__.py is its own package: "." is raynb.train, ".." is raynb.
    assert targets(source, "raynb.train", is_package=True) == [
        "raynb",
        "raynb.train.session",
        "raynb.train.session",
        "raynb.train",
        "raynb.train.config",
        "raynb",
        "raynb.cluster.protocol",
        "raynb.tune",
    ]
    with pytest.raises(ValueError, match="beyond the top-level package"):
        targets("from ... import x\n", "raynb.errors")


def test_layer_rules_catch_reaching_up_and_sideways():
    imports = scan_source(
        "from .. import connect\nfrom .. import cli\nfrom ..tune import x\n",
        "raynb.train.session",
        False,
        KNOWN | {"raynb.cli"},
    )
    problems = layer_violations("raynb/train/session.py", "raynb.train.session", imports, KNOWN)
    assert [p.split(":")[0] for p in problems] == [
        "raynb/train/session.py imports raynb",
        "raynb/train/session.py imports raynb.cli",
        "raynb/train/session.py imports raynb.tune",
    ]
    assert layer_violations(
        "raynb/errors.py",
        "raynb.errors",
        scan_source("from .cluster import protocol\n", "raynb.errors", False, KNOWN),
        KNOWN,
    )


def test_cycle_finder():
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert find_cycles(graph) == ["a -> b -> a", "a -> b -> c -> a"]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_scan_found_the_tree():
    imports = scan_tree()
    assert len(imports) >= 40, f"only {len(imports)} modules found under {PKG_DIR}"
    edges = sum(len(v) for v in import_graph(imports).values())
    assert edges >= 40, f"only {edges} import edges between raynb modules: scanner broken?"
