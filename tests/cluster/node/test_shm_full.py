"""In-memory data and a small ``/dev/shm``: a private tmpfs of 8 MiB mounted at ``/dev/shm``
in a mount namespace of its own (``unshare -m``), a cluster and a driver inside it. Data
larger than ``/dev/shm``, or a ``/dev/shm`` that fills up while a segment is written, is
a ``SharedMemoryFull`` (a ``MemoryError``) that names ``/dev/shm``, its free and needed
bytes and the fixes, never an ``UnpicklableError`` with pickling advice; data that fits
still trains there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[3])

DRIVER = r"""
import json, os
import numpy as np
import raynb
from raynb.cluster.node import shm
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

raynb.connect(num_workers=1)
out = {"shm_total": os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize}

def fit(fn, **kw):
    try:
        r = TorchTrainer(fn, scaling_config=ScalingConfig(num_workers=1),
                         run_config=RunConfig(verbose=0), **kw).fit()
        return {"ok": r.metrics.get("rows")}
    except BaseException as e:
        return {"type": type(e).__name__, "memory": isinstance(e, MemoryError), "message": str(e)}

def rows(config):
    shard = raynb.train.get_dataset_shard("train")
    raynb.train.report({"rows": sum(len(b["data"]) for b in shard.iter_batches(batch_size=1000))})

out["too_big"] = fit(rows, datasets={"train": raynb.data.from_numpy(np.zeros((20000, 128)))})
out["fits"] = fit(rows, datasets={"train": raynb.data.from_numpy(np.zeros((2000, 128)))})
big = np.ones(20 << 20, dtype=np.uint8)
def captured(config):
    raynb.train.report({"rows": int(big.sum())})
out["captured"] = fit(captured)

# /dev/shm filling up while a segment is written: room taken by another process's file.
with open("/dev/shm/filler", "wb") as f:
    f.write(b"x" * (6 << 20))
arrays = {"a": np.zeros(4 << 20, dtype=np.uint8)}
layout, nbytes = shm.layout_of(arrays)
try:
    shm.write_segment("raynb-test-1-k-0", arrays, layout, nbytes, "a test block")
    out["during"] = {"ok": True}
except BaseException as e:
    out["during"] = {"type": type(e).__name__, "memory": isinstance(e, MemoryError), "message": str(e)}
out["left"] = sorted(os.listdir("/dev/shm"))
print("RESULT " + json.dumps(out), flush=True)
"""


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"], capture_output=True
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare -m to mount a private /dev/shm")
def test_data_over_a_small_dev_shm_is_an_error_that_names_it(tmp_path):
    (tmp_path / "driver.py").write_text(DRIVER)
    env = dict(
        os.environ,
        RAYNB_HOME=str(tmp_path / "home"),
        RAYNB_STORAGE_PATH=str(tmp_path / "results"),
        PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
    )
    script = f"mount -t tmpfs -o size=8m tmpfs /dev/shm && exec {sys.executable} {tmp_path / 'driver.py'}"
    try:
        proc = subprocess.run(
            ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=400
        )
    finally:
        subprocess.run([sys.executable, "-m", "raynb.cli", "stop"], env=env, capture_output=True, timeout=60)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, proc.stdout + proc.stderr
    out = json.loads(line[len("RESULT ") :])
    assert out["shm_total"] == 8 << 20
    for case, needed in (("too_big", 20000 * 128 * 8), ("captured", 20 << 20), ("during", 4 << 20)):
        err = out[case]
        assert err.get("type") == "SharedMemoryFull" and err["memory"], (case, err)
        msg = err["message"]
        assert "/dev/shm" in msg and f"needs {needed} bytes" in msg, (case, msg)
        assert " bytes (" in msg.split("but /dev/shm has ", 1)[1], (case, msg)  # its free bytes
        for fix in ("read_parquet", "--shm-size", "fewer copies"):
            assert fix in msg, (case, fix, msg)
        assert "pickl" not in msg.lower(), (case, msg)
    assert "filled up while the segment was written" in out["during"]["message"]
    assert out["fits"] == {"ok": 2000}, out["fits"]
    assert out["left"] == ["filler"], out["left"]  # the refused segment was removed
