"""Run Ray documentation scripts one after another in this one process, each as
``__main__`` with its own ``sys.argv`` and a fresh temporary working directory, and print
one ``RAYNB-SCRIPT {json}`` line per script (status, seconds, error line).

    raynb run _run_scripts.py a.py b.py          # the scripts as `raynb run` serves them
    python _run_scripts.py --rewrite a.py b.py   # copies with the name `ray` made `raynb`

One process for the lot keeps the conformance test's cost to the scripts' own work
(each `raynb run` of its own pays Python's and torch's imports again).
"""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _rewrite_imports():
    spec = importlib.util.spec_from_file_location(
        "raynb_bench_ray_examples", ROOT / "benchmarks" / "ray_examples.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.rewrite_imports


def run_one(path: str, rewrite) -> dict:
    tmp = tempfile.mkdtemp(prefix="raynb-doc-script-")
    target = path
    if rewrite is not None:
        target = os.path.join(tmp, Path(path).name)
        Path(target).write_text(rewrite(Path(path).read_text()))
    old_argv, old_cwd, old_path, old_tempdir = sys.argv, os.getcwd(), list(sys.path), tempfile.tempdir
    sys.argv, status, reason = [target], "pass", ""
    tempfile.tempdir = tmp  # what a script makes with mkdtemp() (Ray's pages do) goes with it
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    t0 = time.monotonic()
    try:
        os.chdir(tmp)
        runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        if e.code not in (0, None):
            status, reason = "fail", f"SystemExit: {e.code}"
    except BaseException as e:  # noqa: BLE001 - every failure is reported, the next script runs
        status = "fail"
        reason = f"{type(e).__name__}: {e}"[:400]
        traceback.print_exc()
    finally:
        os.chdir(old_cwd)
        sys.argv, sys.path[:], tempfile.tempdir = old_argv, old_path, old_tempdir
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "script": Path(path).name,
        "status": status,
        "seconds": round(time.monotonic() - t0, 2),
        "reason": reason,
    }


def main(argv: list[str]) -> int:
    rewrite = None
    if argv and argv[0] == "--rewrite":
        rewrite, argv = _rewrite_imports(), argv[1:]
    failed = 0
    for path in argv:
        result = run_one(path, rewrite)
        failed += result["status"] != "pass"
        print("RAYNB-SCRIPT " + json.dumps(result), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
