"""``raynb run SCRIPT [ARGS...]``: an unchanged Ray script as ``__main__``, served by raynb.

The script runs in this process with :func:`raynb.compat.install` in place, its own argv
and ``sys.path[0]`` (as ``python SCRIPT`` gives); a cluster the run started (``ray.init()``,
a first ``fit()``) is stopped when it ends; a cluster that was already running stays.
"""
from __future__ import annotations

import os
import runpy
import sys
import traceback

from ..client import connection
from ..cluster.launch.local import running_cluster, stop_cluster
from .ray_shim import install


def run_script(script: str, args: list[str]) -> int:
    """Run ``script`` with ``args`` as ``__main__`` on raynb; the exit status ``python`` gives.

    Returns:
        0 when the script ends; ``n`` for ``sys.exit(n)``; 1 when it raises (its traceback
        printed on stderr, without raynb's frames); 130 on Ctrl-C; 2 when ``script`` is not a
        readable file.
    """
    if not os.path.isfile(script):
        print(f"raynb run: {script}: no such file (give the path of a Python script, e.g. "
              f"`raynb run train.py --smoke-test`)", file=sys.stderr)
        return 2
    path = os.path.abspath(script)
    was_running = running_cluster() is not None
    install()
    old_argv, old_path0 = sys.argv, sys.path[0] if sys.path else None
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(path))
    try:
        return _run(path)
    finally:
        sys.argv = old_argv
        if sys.path and sys.path[0] == os.path.dirname(path) and old_path0 != sys.path[0]:
            del sys.path[0]
        _stop_started(was_running)


def _run(path: str) -> int:
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        return _exit_status(e.code)
    except KeyboardInterrupt:
        _print_script_traceback(path)
        return 130
    except BaseException:   # noqa: BLE001 - the script's own error, printed as python would
        _print_script_traceback(path)
        return 1
    finally:
        sys.stdout.flush()
    return 0


def _exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)   # sys.exit("message"): python prints it, status 1
    return 1


def _print_script_traceback(path: str) -> None:
    """The traceback from the script's first frame on, as ``python SCRIPT`` prints it."""
    etype, value, tb = sys.exc_info()
    first = tb
    while first is not None and first.tb_frame.f_code.co_filename != path:
        first = first.tb_next
    traceback.print_exception(etype, value, first or tb)
    sys.stderr.flush()


def _stop_started(was_running: bool) -> None:
    """Stop the local cluster when this run started it (left running when it was there)."""
    if connection.get_client(connect_if_needed=False) is not None:
        connection.disconnect()
    if not was_running and running_cluster() is not None:
        stop_cluster()
