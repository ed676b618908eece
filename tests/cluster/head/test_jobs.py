"""Jobs (``raynb submit``, ``raynb jobs list|logs|stop``) on a real local cluster of its
own: a driver that outlives its killed client, with complete logs; a stop; a working
directory over the limit refused before anything is sent; an archive escaping its
directory refused by the head."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time

import psutil
import pytest
from conftest import alive, private_cluster

from raynb.client import jobs as jobs_client
from raynb.cluster.head.jobs import JobRefused, unpack

JOB = """
import sys, time
import raynb
from raynb.train import ScalingConfig, RunConfig
from raynb.train.torch import TorchTrainer
from helper import word
for i in range(20):
    print(f"line {i} {word()}", flush=True)
    time.sleep(0.1)
def f(config):
    from raynb.train import report
    report({"x": 41 + 1})
r = TorchTrainer(f, scaling_config=ScalingConfig(num_workers=1), run_config=RunConfig(verbose=0)).fit()
print("fit", r.metrics["x"], flush=True)
"""


def _cli(*args, env=None, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "raynb.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, **(env or {})),
        **kw,
    )


def test_job_outlives_its_killed_client_and_its_logs_are_complete(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(JOB)
    (work / "helper.py").write_text("def word():\n    return 'hello'\n")
    with private_cluster(tmp_path, monkeypatch, workers=1) as (info, client, pids):
        sub = _cli("submit", "--working-dir", str(work), "--", sys.executable, "train.py")
        first = sub.stdout.readline()
        assert first.startswith("line 0 hello"), first + sub.stderr.read()
        sub.kill()  # the client goes away mid-job
        sub.wait()
        jobs = jobs_client.list_jobs(client)
        assert len(jobs) == 1 and jobs[0]["state"] == "RUNNING"
        job_id = jobs[0]["job_id"]
        out = []
        state = jobs_client.job_logs(client, job_id, follow=True, write=out.append)
        text = "".join(out)
        assert state == "SUCCEEDED", text
        assert [f"line {i} hello" for i in range(20)] == text.splitlines()[:20]
        assert "fit 42" in text  # the driver found its cluster (the head's RAYNB_HOME)
        import raynb

        name = raynb.runs()["name"].iloc[-1]  # the job's run, attached from here
        assert raynb.attach(name, verbose=0).metrics["x"] == 42
        work_dir = jobs[0]["working_dir"]
        assert os.stat(work_dir).st_mode & 0o077 == 0 and (os.path.basename(work_dir) == "work")
        listed = _cli("jobs", "list")
        assert job_id in listed.communicate(timeout=60)[0]
        logs = _cli("jobs", "logs", job_id)
        assert logs.communicate(timeout=60)[0] == text
        failing = _cli("submit", "--", sys.executable, "-c", "print('bye'); raise SystemExit(3)")
        out, err = failing.communicate(timeout=120)
        assert failing.returncode == 3 and out == "bye\n", (failing.returncode, out, err)  # the driver's own


def test_job_stop_ends_its_processes(tmp_path, monkeypatch):
    with private_cluster(tmp_path, monkeypatch, workers=1) as (info, client, pids):
        job = jobs_client.submit_job(
            client,
            [
                sys.executable,
                "-c",
                "import subprocess, time; subprocess.Popen(['sleep', '60']); "
                "print('up', flush=True); time.sleep(60)",
            ],
        )
        assert job["state"] == "RUNNING"
        deadline = time.monotonic() + 30
        while "up" not in "".join(_collect(client, job["job_id"])) and time.monotonic() < deadline:
            time.sleep(0.1)
        group = [p.pid for p in psutil.process_iter() if _pgid(p.pid) == job["pid"]]
        assert len(group) == 3, group  # the job's supervisor, the driver and the sleep it started
        stop = _cli("jobs", "stop", job["job_id"])
        assert "STOPPED" in stop.communicate(timeout=60)[0]
        assert not alive(group)
        with pytest.raises(Exception, match="no job 'nope'"):
            jobs_client.stop_job(client, "nope")


def _pgid(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _collect(client, job_id):
    out = []
    jobs_client.job_logs(client, job_id, write=out.append)
    return out


def test_working_dir_over_the_limit_is_refused_before_anything_is_sent(tmp_path):
    big = tmp_path / "big"
    big.mkdir()
    (big / "data.bin").write_bytes(b"x" * 5000)
    with pytest.raises(ValueError, match=r"holds 5000 bytes, over the limit of 1000 bytes .*data\.bin"):
        jobs_client.pack_working_dir(big, limit=1000)
    # The CLI refuses it before it looks for a cluster (there is none in this RAYNB_HOME).
    sub = _cli(
        "submit",
        "--working-dir",
        str(big),
        "--",
        "python",
        "x.py",
        env={"RAYNB_MAX_WORKING_DIR_BYTES": "1000", "RAYNB_HOME": str(tmp_path / "h")},
    )
    out, err = sub.communicate(timeout=60)
    assert sub.returncode == 2 and "over the limit of 1000 bytes" in err and "nothing was sent" in err, err
    assert not (tmp_path / "h" / "cluster.json").exists()


def test_head_refuses_an_archive_that_escapes_its_directory(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"owned"
        member = tarfile.TarInfo("../escaped.txt")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(JobRefused, match="cannot be unpacked"):
        unpack(buf.getvalue(), dest)
    assert not (tmp_path / "escaped.txt").exists()
    with pytest.raises(JobRefused, match="over the limit"):
        unpack(jobs_client.pack_working_dir(_one_file(tmp_path, 2000)), dest, limit=100)


def _one_file(tmp_path, size):
    d = tmp_path / "one"
    d.mkdir()
    (d / "f").write_bytes(b"y" * size)
    return d
