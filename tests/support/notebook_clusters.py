"""``pytest --nbval-lax notebooks/``: every notebook gets a cluster of its own.

A pytest plugin, loaded by the repository root's ``conftest.py`` (``pytest_plugins``) for
every run from this checkout, so that ``notebooks/`` holds only the notebooks (what a
Binder user sees in the file browser). Its hooks act on nbval's notebook items only.

nbval starts each notebook's kernel from this process, and the kernel inherits
this process's environment. While it starts, ``RAYNB_HOME`` and
``RAYNB_STORAGE_PATH`` point at fresh directories under pytest's temporary
directory, so a notebook's ``%%ray_train`` starts its own cluster there and its
closing ``%ray_cluster stop`` stops only that one: never the developer's
``~/.raynb`` cluster, nor the session cluster of ``tests/`` (whose fixture sets
``RAYNB_HOME`` in this same process).

When the notebook is done (its kernel shut down), any cluster it left behind
(a failing cell before the stop cell) is stopped, so the test run leaves no
process. The directories stay with pytest's other temporary files (the cluster
logs are in ``<home>/logs``).
"""

from __future__ import annotations

import os
import tempfile

import pytest

_VARS = ("RAYNB_HOME", "RAYNB_STORAGE_PATH")


def _notebook(item):
    """The notebook (nbval's file collector) an item is a cell of, or None."""
    parent = getattr(item, "parent", None)
    path = str(getattr(parent, "path", "") or getattr(parent, "fspath", ""))
    return parent if path.endswith(".ipynb") else None


def _mkdtemp(config, name: str) -> str:
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        return str(factory.mktemp(name))
    return tempfile.mkdtemp(prefix=f"{name}-")


class _Env:
    """Sets environment variables in this process; ``restore()`` undoes it."""

    def __init__(self, values: dict):
        self.values = values
        self.saved = {k: os.environ.get(k) for k in values}
        os.environ.update(values)

    def restore(self) -> None:
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    nb = _notebook(item)
    if nb is None or hasattr(nb, "_raynb_env"):
        yield
        return
    stem = os.path.splitext(os.path.basename(str(nb.path)))[0]
    nb._raynb_env = {
        "RAYNB_HOME": _mkdtemp(item.config, f"raynb_home_{stem}"),
        "RAYNB_STORAGE_PATH": _mkdtemp(item.config, f"raynb_results_{stem}"),
    }
    env = _Env(nb._raynb_env)
    try:
        yield  # the notebook's first cell: nbval starts the kernel here
    finally:
        env.restore()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # after the notebook's last cell, nbval shuts its kernel down here
    nb = _notebook(item)
    if nb is None or not hasattr(nb, "_raynb_env"):
        return
    if nextitem is not None and _notebook(nextitem) is nb:
        return
    env = _Env(nb._raynb_env)
    try:
        from raynb.cluster.launch import stop_cluster

        if stop_cluster():
            print(f"\n{nb.path}: stopped the raynb cluster the notebook left running")
    finally:
        env.restore()
