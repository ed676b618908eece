"""Shared fixtures: one real warm cluster for the whole session.

Every test here talks to real processes over real sockets. The session cluster
fails the run if stopping it leaves any of its processes behind.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager

import pytest

from raynb.cluster.procutil import alive  # noqa: F401 - the tests import it from here

TESTS = os.path.dirname(os.path.abspath(__file__))


def import_paths(test_file: str) -> list[str]:
    """What a child Python (a second client, a kernel) puts first on ``sys.path`` to import
    ``test_file``'s module by name and, through it, this conftest's helpers."""
    return [os.path.dirname(os.path.abspath(test_file)), TESTS]


@pytest.fixture(scope="session", autouse=True)
def _sigint_raises_keyboardinterrupt():
    """Tests interrupt themselves (SIGINT) as a notebook's interrupt button does. A
    process started in the background by a non-interactive shell (`cmd &`, nohup)
    inherits SIGINT ignored, and Python then never raises KeyboardInterrupt: restore
    Python's own handler for the session."""
    old = signal.getsignal(signal.SIGINT)
    if old is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.fixture(scope="session", autouse=True)
def _nothing_left_by_killed_agents():
    """Tests SIGKILL node agents (and whole clusters), which then cannot remove their
    workers' temp dirs nor their shared-memory segments: the next agent's start does,
    and, after the last test, this (only those whose agent's pid is gone)."""
    yield
    from raynb.cluster.node import shm
    from raynb.cluster.node.host import remove_stale_workers_tmp

    remove_stale_workers_tmp()
    shm.remove_stale()


@pytest.fixture(scope="session")
def raynb_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("raynb_home")
    storage = tmp_path_factory.mktemp("raynb_results")
    old = {k: os.environ.get(k) for k in ("RAYNB_HOME", "RAYNB_STORAGE_PATH", "RAYNB_PROGRESS")}
    os.environ["RAYNB_HOME"] = str(home)
    os.environ["RAYNB_STORAGE_PATH"] = str(storage)
    os.environ["RAYNB_PROGRESS"] = "text"
    yield home
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def cluster(raynb_home):
    """A started 4-worker local cluster and a connected client, shared by all tests."""
    import raynb
    from raynb.cluster.launch import cluster_pids, start_cluster, stop_cluster

    info, started = start_cluster(num_workers=4)
    assert started, "a cluster was already running in the test's RAYNB_HOME"
    client = raynb.connect()
    yield client
    pids = set(cluster_pids(info))
    raynb.disconnect()
    assert stop_cluster()
    deadline = time.monotonic() + 10
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pids), f"raynb processes left behind after stop: {alive(pids)}"


def wait_idle_workers(client, n: int = 4, timeout: float = 30.0) -> dict:
    """Wait until the cluster has at least ``n`` idle workers; returns the status."""
    deadline = time.monotonic() + timeout
    while True:
        st = client.status()
        if sum(w["state"] == "idle" for w in st["workers"]) >= n:
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"cluster did not get back to {n} idle workers: {st['workers']}")
        time.sleep(0.05)


@pytest.fixture
def warm(cluster):
    """The session cluster, with 4 idle workers before the test starts."""
    wait_idle_workers(cluster, 4)
    return cluster


# Session hooks, not a fixture: a fixture's source would count toward every test's kind
# (tests/support/markers.py reads what a test uses).
_HOME_DIRS = (".ray", ".keras", ".ipython")
_home_before: dict = {}


def pytest_sessionstart(session):
    """Note what of the home directory exists before the tests (see pytest_sessionfinish)."""
    from pathlib import Path

    home = Path.home()
    _home_before.update({home / name: (home / name).exists() for name in _HOME_DIRS})
    _home_before[home / ".ray" / "auth_token"] = (home / ".ray" / "auth_token").exists()


def pytest_sessionfinish(session, exitstatus):
    """What the tests left in the home directory goes with the session, only what was not
    there before it: Ray's start makes ``~/.ray`` (and a token file in it), TensorFlow
    ``~/.keras``, a kernel ``~/.ipython``."""
    import shutil

    for path, existed in _home_before.items():
        if existed:
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def shell(cluster, tmp_path_factory):
    """A real IPython shell (in-memory history) with raynb's magics loaded."""
    old = os.environ.get("IPYTHONDIR")
    os.environ["IPYTHONDIR"] = str(tmp_path_factory.mktemp("ipython"))
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    sh = InteractiveShell.instance(config=config)
    sh.run_line_magic("load_ext", "raynb")
    yield sh
    if old is None:
        os.environ.pop("IPYTHONDIR", None)
    else:
        os.environ["IPYTHONDIR"] = old


@pytest.fixture
def ip(shell, warm):
    """The shell, with 4 idle workers."""
    return shell


def run_cell(shell, cell: str):
    """Run a cell as the notebook would; returns (ExecutionResult, captured output)."""
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        res = shell.run_cell(cell, store_history=True)
    return res, cap


def ok_cell(shell, cell: str):
    """``run_cell``, asserting the cell raised nothing."""
    res, cap = run_cell(shell, cell)
    assert res.error_before_exec is None and res.error_in_exec is None, (
        f"{res.error_before_exec or res.error_in_exec!r}\n{cap.stdout}\n{cap.stderr}"
    )
    return res, cap


@contextmanager
def private_cluster(tmp_path, monkeypatch, workers: int = 1, env: dict | None = None, **start_kwargs):
    """A cluster of its own in ``tmp_path/home`` (the session's connection is set aside,
    not closed, and comes back afterwards), with ``env`` set for it. Yields
    ``(info, client, pids)``. When it ends, the cluster is stopped and the test fails if
    any of its processes (also those of a cluster that replaced it there) is left."""
    import raynb
    import raynb.client.connection
    from raynb.cluster.connection_file import read_connection_file
    from raynb.cluster.launch import cluster_pids, start_cluster, stop_cluster

    monkeypatch.setattr(raynb.client.connection, "_client", None)
    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "home"))
    # Its runs (and those of the jobs its head starts) stay in the test's directory, never
    # in ~/raynb_results (a test that uses no session fixture has no storage path set).
    monkeypatch.setenv("RAYNB_STORAGE_PATH", str(tmp_path / "results"))
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    info, started = start_cluster(num_workers=workers, **start_kwargs)
    assert started
    pids = set(cluster_pids(info))
    try:
        yield info, raynb.connect(), pids
    finally:
        current = read_connection_file()
        if current is not None:
            pids |= set(cluster_pids(current))
        raynb.disconnect()
        stop_cluster()
        deadline = time.monotonic() + 10
        while alive(pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pids), f"processes left behind: {alive(pids)}"


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers it sets
def pytest_collection_modifyitems(config, items):
    """Each test gets its kind as a marker (tests/support/markers.py): `pytest -m unit`."""
    from tests.support.markers import mark

    mark(items)
