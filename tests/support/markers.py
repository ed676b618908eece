"""Which kind of test an item is, read from what it uses, so that one area's tests run
alone (``pytest -m unit``, ``-m "cluster and not multihost"``, ``-m ray``).

A test is marked by the fixtures it requests (transitively) and by the source of its
function and of those fixtures: a test that starts no process and opens no socket is a
``unit`` test. A marker written on a test by hand is kept and added to.
"""
from __future__ import annotations

import inspect

import pytest

# marker -> what it is for (registered with --strict-markers in pyproject.toml too)
MARKERS = {
    "unit": "no process, socket or cluster: pure functions and in-process objects",
    "cluster": "real processes: a raynb cluster (the session's shared one or a private one) or other subprocesses",
    "kernel": "a real Jupyter kernel (jupyter_client) or nbclient",
    "multihost": "hosts in Linux network namespaces (root)",
    "ray": "a real Ray cluster",
    "browser": "a real headless chromium through Playwright",
}

# Words in a test's source (or its fixtures') that say which kind it is.
_SIGNS = {
    "multihost": ("Net(", "netns", "three_hosts", "multihost", "two_hosts"),
    "ray": ("ray_cluster", "ray.init", "import ray", "ray_support", "ray start", "--ray"),
    "kernel": ("KernelManager", "jupyter_client", "nbclient", "start_new_kernel", "nbval"),
    "browser": ("playwright", "chromium", "browser_check"),
    "cluster": ("private_cluster(", "start_cluster(", "Popen(", "subprocess.", "connect(", "os.fork(",
                "multiprocessing", "raynb.cli", "TorchTrainer(", "Tuner(", ".fit()", "zmq.",
                "subprocess", "sys.executable"),
}
_CLUSTER_FIXTURES = {"cluster", "warm", "shell", "ip", "raynb_home"}


def _names(code) -> set[str]:
    """Every global name a code object (and the functions nested in it) refers to."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _names(const)
    return names


def _helpers(fn, depth: int = 3, seen: set | None = None) -> list:
    """``fn`` and the test-suite functions it calls, ``depth`` calls deep (helpers such as
    ``cli()`` or ``fake_head()`` start the processes, not the test's own lines)."""
    seen = set() if seen is None else seen
    if not callable(fn):
        return []
    fn = inspect.unwrap(fn)
    if not inspect.isfunction(fn) or id(fn) in seen or "/tests/" not in fn.__code__.co_filename:
        return []
    seen.add(id(fn))
    found = [fn]
    if depth:
        for name in _names(fn.__code__):
            found += _helpers(fn.__globals__.get(name), depth - 1, seen)
    return found


def _sources(item) -> str:
    roots = [getattr(item, "function", None)]
    fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    roots += [d.func for defs in fixtures.values() for d in defs if d.baseid]
    seen: set = set()
    parts = []
    for root in roots:
        for fn in _helpers(root, seen=seen):
            try:
                parts.append(inspect.getsource(fn))
            except (OSError, TypeError):
                pass
    return "\n".join(parts)


def kinds(item) -> set[str]:
    """The markers ``item`` gets from what it uses."""
    found = {m for m in MARKERS if item.get_closest_marker(m)}
    if getattr(item, "function", None) is None:   # a notebook's cell (nbval): a kernel and a cluster
        return found | {"kernel", "cluster"}
    source = _sources(item)
    found |= {m for m, signs in _SIGNS.items() if any(s in source for s in signs)}
    if _CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
        found.add("cluster")
    if found & {"multihost", "ray", "kernel", "browser"}:
        found.add("cluster")
    return found or {"unit"}


def mark(items) -> None:
    for item in items:
        for name in kinds(item):
            if not item.get_closest_marker(name):
                item.add_marker(getattr(pytest.mark, name))
