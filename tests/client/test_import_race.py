"""Shipping a function while another thread of the driver imports torch.

raynb's own threads import torch in the driver (``TBXLoggerCallback`` on the callbacks
thread imports ``torch.utils.tensorboard`` when a trial starts) while the main thread
pickles the next trial's function. The pickler looks at ``sys.modules["torch"]`` to send
large tensors through shared memory; a half-imported torch has no ``Tensor`` yet, and the
submission failed (``partially initialized module 'torch' has no attribute 'Tensor'``).

``RAYNB_TEST_FRESH_DRIVERS=50`` runs 50 fresh driver processes in the second test
(default: as many as fit in about 60 seconds, at least 3).
"""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WAIT_FOR_TORCH = textwrap.dedent("""
    import sys, threading, time
    from raynb.client import bulk, shipping
    t = threading.Thread(target=lambda: __import__("torch"))
    t.start()
    while "torch" not in sys.modules:   # torch's import has begun and is not finished
        time.sleep(0.0002)
    assert sys.modules["torch"].__spec__._initializing
    def trainable(config):
        return config
    with bulk.active("import_race_test"):
        shipping.dumps_payload(trainable, {"x": 1})
    assert not getattr(sys.modules["torch"].__spec__, "_initializing", False)
    t.join()
    print("SHIPPED")
""")

TUNE_SCRIPT = textwrap.dedent("""
    import sys
    from raynb import tune
    from raynb.train import RunConfig
    from raynb.tune.logger import TBXLoggerCallback

    def trainable(config):
        for i in range(2):
            tune.report({"score": config["x"] * i})

    tuner = tune.Tuner(trainable, param_space={"x": tune.grid_search([1, 2, 3, 4, 5, 6])},
                       run_config=RunConfig(callbacks=[TBXLoggerCallback()]))
    grid = tuner.fit()
    errors = [str(r.error) for r in grid if r.error]
    print("ERRORS", len(errors), errors[:1])
    sys.exit(1 if errors else 0)
""")


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_pickling_waits_for_an_import_of_torch_in_another_thread():
    proc = subprocess.run(
        [sys.executable, "-c", WAIT_FOR_TORCH], env=_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "SHIPPED" in proc.stdout, proc.stdout + proc.stderr


def test_fresh_tune_drivers_never_fail_on_the_torch_import(cluster, tmp_path):
    script = tmp_path / "tune_no_torch.py"
    script.write_text(TUNE_SCRIPT)
    wanted = int(os.environ.get("RAYNB_TEST_FRESH_DRIVERS", "0"))
    budget_s = 20.0  # RAYNB_TEST_FRESH_DRIVERS=50 runs the fifty; the race itself: the test above
    start, runs, failures = time.monotonic(), 0, []
    while (runs < wanted) if wanted else (runs < 3 or time.monotonic() - start < budget_s):
        proc = subprocess.run(
            [sys.executable, str(script)],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=180,
            cwd=tmp_path,
        )
        runs += 1
        if proc.returncode != 0:
            failures.append(proc.stdout[-800:] + proc.stderr[-1500:])
    print(f"{runs} fresh drivers, {len(failures)} failed")
    assert not failures, f"{len(failures)} of {runs} fresh drivers failed; the first:\n{failures[0]}"
