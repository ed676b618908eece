"""Jobs given bad input, on a real local cluster of their own: ids, arguments and
variables the head refuses before it makes anything (and a refused id that can be
submitted again); symbolic links in a working directory kept or refused with a reason;
processes a job starts in a session of their own (``setsid``) ended with the job's
stop, with the driver's exit, and with ``raynb stop``."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
import time

import psutil
import pytest
from conftest import alive, private_cluster

from raynb.client import jobs
from raynb.cluster.protocol import messages
from raynb.errors import ClusterError

# A driver that starts a grandchild in a new session (out of the job's process group),
# writes its pid, and sleeps.
ESCAPER = """
import os, subprocess, sys, time
p = subprocess.Popen(["setsid", "sleep", "300"])
q = subprocess.Popen([sys.executable, "-c", "import os, time\\nif os.fork() == 0:\\n    os.setsid(); time.sleep(300)"])
q.wait()
print("pids", p.pid, flush=True)
time.sleep(float(sys.argv[1]))
"""


def _raw_submit(client, content, buffers=()):
    """A submit_job as any client could send it, past the client library's own checks."""
    return client.request(
        messages.SUBMIT_JOB, content, reply_types=(messages.JOB_REPLY,), timeout=60, buffers=buffers
    )


def _jobs_dir():
    return os.path.join(os.environ["RAYNB_HOME"], "jobs")


def test_bad_ids_arguments_and_variables_are_refused_before_anything_is_made(tmp_path, monkeypatch):
    cmd = [sys.executable, "-c", "print('ok')"]
    cases = [
        ({"job_id": "."}, "job id '.' is not valid"),
        ({"job_id": ".."}, "job id '..' is not valid"),
        ({"job_id": "a/b"}, "job id 'a/b' is not valid"),
        ({"job_id": ""}, "job id '' is not valid"),
        ({"job_id": "x" * 65}, "is not valid: a job id is 1-64"),
        ({"entrypoint": [sys.executable, "-c", "print(1)\0"]}, "argument 2 of the command .* NUL"),
        ({"env": {"A=B": "1"}}, "variable name 'A=B' is not valid"),
        ({"env": {"": "1"}}, "variable name '' is not valid"),
        ({"env": {"K": "v\0w"}}, "variable 'K' holds a NUL"),
    ]
    with private_cluster(tmp_path, monkeypatch, workers=1, head_only=True) as (info, client, pids):
        for extra, why in cases:
            content = {"entrypoint": cmd, **extra}
            reply = _raw_submit(client, content)
            assert reply.msg_type == messages.ERROR, (extra, reply.content)
            assert re.search(why, reply.content["message"]), (why, reply.content)
            with pytest.raises(ValueError, match=why):  # the client refuses it before sending
                jobs.submit_job(
                    client, content["entrypoint"], env=content.get("env"), job_id=content.get("job_id")
                )
        assert not os.path.exists(_jobs_dir()) or os.listdir(_jobs_dir()) == []
        assert jobs.list_jobs(client) == []
        # A submit refused for its archive burns no id: the same id is accepted next.
        reply = _raw_submit(client, {"entrypoint": cmd, "job_id": "again"}, buffers=[b"not a tar.gz"])
        assert reply.msg_type == messages.ERROR and "cannot be unpacked" in reply.content["message"]
        assert not os.path.exists(os.path.join(_jobs_dir(), "again"))
        # A link out of the tree, in an archive made by hand: refused by the head, no id burnt.
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            link = tarfile.TarInfo("etc")
            link.type, link.linkname = tarfile.SYMTYPE, "/etc"
            tar.addfile(link)
        reply = _raw_submit(client, {"entrypoint": cmd, "job_id": "again"}, buffers=[buf.getvalue()])
        assert reply.msg_type == messages.ERROR and "cannot be unpacked" in reply.content["message"], (
            reply.content
        )
        assert not os.path.exists(os.path.join(_jobs_dir(), "again"))
        job = jobs.submit_job(client, cmd, job_id="again")
        assert job["job_id"] == "again"
        assert jobs.job_logs(client, "again", follow=True, write=lambda t: None) == "SUCCEEDED"
        with pytest.raises(ClusterError, match="exists already"):
            jobs.submit_job(client, cmd, job_id="again")


def test_links_in_the_working_directory_are_kept_inside_and_refused_outside(tmp_path, monkeypatch):
    work = tmp_path / "work"
    (work / "pkg" / "data").mkdir(parents=True)
    (work / "pkg" / "data" / "a.txt").write_text("in the tree")
    (work / "data").symlink_to("pkg/data", target_is_directory=True)  # relative, to a directory
    (work / "abs").symlink_to(work / "pkg" / "data", target_is_directory=True)  # absolute, inside
    (work / "b.txt").symlink_to("pkg/data/a.txt")
    script = (
        "import os; print(os.path.islink('data'), open('data/a.txt').read(), "
        "open('abs/a.txt').read(), open('b.txt').read())"
    )
    outside = tmp_path / "outside"
    outside.mkdir()
    with private_cluster(tmp_path, monkeypatch, workers=1, head_only=True) as (info, client, pids):
        job = jobs.submit_job(client, [sys.executable, "-c", script], working_dir=work)
        out = []
        assert jobs.job_logs(client, job["job_id"], follow=True, write=out.append) == "SUCCEEDED", out
        assert "".join(out).strip() == "True in the tree in the tree in the tree"
        (work / "escape").symlink_to(outside, target_is_directory=True)
        with pytest.raises(ValueError, match=r"symbolic link 'escape' -> .* points outside it"):
            jobs.submit_job(client, [sys.executable, "-c", "pass"], working_dir=work)
        assert len(jobs.list_jobs(client)) == 1


def _started(client, job_id, timeout=60.0):
    """The pids the ESCAPER driver printed, and those of its setsid'd grandchildren."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = "".join(_logs(client, job_id))
        if "pids" in text:
            break
        time.sleep(0.1)
    assert "pids" in text, text
    sleeps = []
    for p in psutil.process_iter(["cmdline"]):
        cmdline = p.info["cmdline"] or []
        if cmdline[:2] == ["sleep", "300"] or "os.setsid(); time.sleep(300)" in " ".join(cmdline):
            sleeps.append(p.pid)
    return sleeps


def _logs(client, job_id):
    out = []
    jobs.job_logs(client, job_id, write=out.append)
    return out


def _escapers_of(job, sleeps):
    """The sleeps that belong to ``job`` (its supervisor's descendants) and left its group."""
    mine = {p.pid for p in psutil.Process(job["pid"]).children(recursive=True)}
    out = [pid for pid in sleeps if pid in mine]
    assert len(out) == 2, (out, sleeps, mine)
    assert all(os.getpgid(pid) != job["pid"] for pid in out)  # out of the job's group
    return out


def test_every_process_a_job_starts_ends_with_it(tmp_path, monkeypatch):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "escaper.py").write_text(ESCAPER)
    with private_cluster(tmp_path, monkeypatch, workers=1, head_only=True) as (info, client, pids):
        # 1. raynb jobs stop
        stopped = jobs.submit_job(client, [sys.executable, "escaper.py", "300"], working_dir=tmp_path / "w")
        left = _escapers_of(stopped, _started(client, stopped["job_id"]))
        assert jobs.stop_job(client, stopped["job_id"])["state"] == "STOPPED"
        assert not alive(left), left
        # 2. the driver exits on its own
        done = jobs.submit_job(client, [sys.executable, "escaper.py", "3"], working_dir=tmp_path / "w")
        left = _escapers_of(done, _started(client, done["job_id"]))
        assert jobs.job_logs(client, done["job_id"], follow=True, write=lambda t: None) == "SUCCEEDED"
        _wait_gone(left)
        assert not alive(left), left
        # 3. raynb stop, with the job running
        last = jobs.submit_job(client, [sys.executable, "escaper.py", "300"], working_dir=tmp_path / "w")
        left = _escapers_of(last, _started(client, last["job_id"]))
        stop = subprocess.run(
            [sys.executable, "-m", "raynb.cli", "stop"], capture_output=True, text=True, timeout=60
        )
        assert stop.returncode == 0, stop.stderr
        _wait_gone(left)
        assert not alive(left), left


def _wait_gone(pids, timeout=10.0):
    deadline = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
