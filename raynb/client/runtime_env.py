"""``runtime_env`` of ``raynb.init`` (Ray's ``runtime_env={"env_vars": ..., "working_dir": ...}``).

Set once per driver process; every run it submits afterwards carries it: ``env_vars`` are
set on each rank for the run's duration, from before its function is unpickled (as Ray sets
them at a worker's start), and put back after, since the warm workers serve other runs
too; ``working_dir`` is each rank's working directory and first on its
``sys.path``. Ray uploads a working directory to the cluster; raynb's ranks read it where
it is, so it must be on a file system every node sees (the local cluster: this machine).
"""

from __future__ import annotations

import os
from pathlib import Path

from .no_effect import accepted_no_effect

_env_vars: dict[str, str] = {}
_working_dir: str | None = None

_NOT_SERVED = {
    "pip": "install the packages on every node (the workers use the notebook's environment)",
    "conda": "use one environment on every node (the workers use the notebook's)",
    "uv": "install the packages on every node (the workers use the notebook's environment)",
    "container": "run raynb's node agents inside the container instead",
    "image_uri": "run raynb's node agents inside the image instead",
}


def set_runtime_env(env: dict | None) -> None:
    """Check and keep ``env`` for the runs this process submits (None clears it).

    Raises:
        TypeError: ``env`` not a dict; ``env_vars`` not a dict of str to str.
        ValueError: a key raynb cannot honour (``pip``, ``conda``, ...: named, with what to
            do instead), an unknown key, or a ``working_dir`` that is not a local directory.
    """
    global _env_vars, _working_dir
    if env is None:
        _env_vars, _working_dir = {}, None
        return
    if not isinstance(env, dict):
        raise TypeError(f"runtime_env must be a dict, got {type(env).__name__}")
    for key in env:
        if key in _NOT_SERVED:
            raise ValueError(f"runtime_env[{key!r}] is not served by raynb: {_NOT_SERVED[key]}")
        if key not in ("env_vars", "working_dir", "py_modules", "excludes", "config"):
            raise ValueError(
                f"runtime_env[{key!r}] is not a runtime_env field raynb knows; it serves "
                "'env_vars', 'working_dir' and 'py_modules' (local directories)"
            )
    env_vars = env.get("env_vars") or {}
    if not isinstance(env_vars, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()
    ):
        raise TypeError(f"runtime_env['env_vars'] must be a dict of str to str, got {env_vars!r}")
    working_dir = env.get("working_dir")
    dirs = [working_dir] if working_dir else []
    dirs += list(env.get("py_modules") or ())
    for d in dirs:
        if not isinstance(d, (str, os.PathLike)) or "://" in str(d) or not Path(d).expanduser().is_dir():
            raise ValueError(
                f"runtime_env: {d!r} is not a local directory; raynb's ranks read it in place "
                "(no upload): give a directory on a file system every node sees"
            )
    if env.get("excludes") or env.get("config"):
        accepted_no_effect(
            "runtime_env['excludes'] / ['config']", "nothing is uploaded: ranks read working_dir in place"
        )
    _env_vars = dict(env_vars)
    _working_dir = str(Path(working_dir).expanduser().resolve()) if working_dir else None
    _py_modules[:] = [str(Path(d).expanduser().resolve()) for d in env.get("py_modules") or ()]


_py_modules: list[str] = []


def apply(spec: dict) -> None:
    """Point a run's ``submit_run`` spec at the working directory and ``py_modules``, and
    give it the variables its ranks get (``env``: see :func:`run_env`)."""
    if _working_dir:
        spec["cwd"] = _working_dir
    extra = ([_working_dir] if _working_dir else []) + _py_modules
    if extra:
        spec["sys_path"] = extra + [p for p in spec.get("sys_path") or () if p not in extra]
    env = run_env()
    if env:
        spec["env"] = env


def run_env() -> dict[str, str]:
    """The environment variables a run's ranks get, set on each (``cluster/worker/task_env.py``)
    from before its function is unpickled to its end: this driver's ``MLFLOW_*`` variables
    (tracking URI, experiment name, ...: Ray's workers inherit its driver's environment, so
    ``setup_mlflow`` and plain MLflow calls on a rank log to the driver's store), then
    ``runtime_env["env_vars"]``, which win."""
    env = {k: v for k, v in os.environ.items() if k.startswith("MLFLOW_")}
    env.update(_env_vars)
    return env
