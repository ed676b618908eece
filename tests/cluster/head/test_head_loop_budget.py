"""The head's loop does no work that grows with user data: with a huge run record open in
a dashboard-like poller (repeated ``get_run``) and a 60,000-file job being unpacked, a
status request is answered within the budget and another client's run finishes; a gzip
bomb is refused before much of it is written."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
from conftest import private_cluster

import raynb
from raynb.cluster.protocol import messages
from raynb.cluster.protocol.control import Client
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

BUDGET_S = 0.1
REPORTS, LINES = 400_000, 1_000_000

# A dashboard's gateway, polling the huge run's record as the page does every 2 s (here
# back to back), and a client asking for the same record with the defaults, until the
# file argv[2] exists (the test is done measuring) or argv[3] seconds have passed.
POLLER = r"""
import os, sys, time
from raynb.notebook.dashboard.gateway import ClusterGateway
from raynb.cluster.connection_file import read_connection_file
from raynb.cluster.protocol.control import Client
from raynb.cluster.protocol import messages as P
name, stop, until = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
gw = ClusterGateway(timeout=30)
info = read_connection_file()
client = Client(info["address"], info["key"].encode(), info)
polls = 0
while not os.path.exists(stop) and time.monotonic() < until:
    rec = gw.record(name)
    assert len(rec["reports"]) == 2000 and rec["reports_dropped"] > 0, (len(rec["reports"]), rec["reports_dropped"])
    assert rec["reports"][-1]["training_iteration"] == %d, rec["reports"][-1]
    full = client.request(P.GET_RUN, {"name": name}, reply_types=(P.RUN_RECORD,), timeout=30).content["record"]
    assert len(full["output"]) == 2000 and full["output"][-1].endswith("line %d"), full["output"][-1:]
    polls += 1
print("polls", polls, flush=True)
""" % (REPORTS, LINES - 1)


def _one_report(config):
    raynb.train.report({"loss": 1.0})


def _short_run(config):
    for i in range(3):
        print("step", i)
        raynb.train.report({"step": i})
    return "done"


def _make_huge_run(path: Path) -> None:
    """Grow a finished run's files to a long run's size (as a 17 s one-rank run that
    printed every step leaves them), written here rather than by a run."""
    row = json.loads((path / "result.json").read_text().splitlines()[0])
    with open(path / "result.json", "w") as f:
        for i in range(REPORTS):
            row["training_iteration"] = i + 1
            f.write(json.dumps(row) + "\n")
    with open(path / "output.log", "w") as f:
        f.writelines(f"(rank 0) line {i}\n" for i in range(LINES))
    state = json.loads((path / "run.json").read_text())
    state["num_reports"] = REPORTS
    (path / "run.json").write_text(json.dumps(state))


def _many_files_archive(n: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for i in range(n):
            tar.addfile(tarfile.TarInfo(f"d{i % 100}/f{i}.txt"))
    return buf.getvalue()


def _status_latencies(client: Client, seconds: float) -> list[float]:
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        client.request(messages.STATUS_REQUEST, {}, reply_types=(messages.STATUS_REPLY,), timeout=10)
        out.append(time.perf_counter() - t)
        time.sleep(0.05)
    return out


def test_status_is_answered_within_budget_under_a_huge_record_and_a_60000_file_job(tmp_path, monkeypatch):
    with private_cluster(tmp_path, monkeypatch, workers=1) as (info, _, _pids):
        huge = TorchTrainer(
            _one_report,
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(name="huge", verbose=0),
        ).fit()
        _make_huge_run(Path(huge.path))
        other = Client(info["address"], info["key"].encode(), info)
        stop_polling = tmp_path / "stop-polling"
        jobs = Client(info["address"], info["key"].encode(), info)
        poller = subprocess.Popen(
            [sys.executable, "-c", POLLER, "huge", str(stop_polling), "120"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        job_reply = {}
        archive = _many_files_archive(60_000)
        submit = threading.Thread(
            target=lambda: job_reply.update(
                msg=jobs.request(
                    messages.SUBMIT_JOB,
                    {"entrypoint": [sys.executable, "-c", "import os; print(len(os.listdir('d7')))"]},
                    reply_types=(messages.JOB_REPLY,),
                    timeout=120,
                    buffers=[archive],
                )
            )
        )
        try:
            time.sleep(2)  # the poller is at it
            submit.start()
            latencies = _status_latencies(other, 6)
            result = TorchTrainer(
                _short_run,
                scaling_config=ScalingConfig(num_workers=1),
                run_config=RunConfig(name="victim", verbose=0),
            ).fit()
            latencies += _status_latencies(other, 2)
            stop_polling.touch()  # the poller was at it through every measurement
            submit.join(120)
            out, err = poller.communicate(timeout=60)
        finally:
            if poller.poll() is None:
                poller.kill()
                poller.wait()
            other.close()
            jobs.close()
        assert result.state == "FINISHED" and result.error is None, result.error
        assert poller.returncode == 0 and "polls" in out, err[-2000:]
        assert int(out.split()[-1]) >= 2, out
        assert job_reply["msg"].msg_type == messages.JOB_REPLY, job_reply["msg"].content
        latencies.sort()
        assert latencies[-1] < BUDGET_S, f"status latencies (s), slowest last: {latencies[-5:]}"
        # The run's own record is whole: the client reads every row where it sees the files.
        assert len(raynb.get_run("huge").metrics_dataframe) == REPORTS


def _bomb(size: int) -> bytes:
    """A .tar.gz of one member of ``size`` zero bytes (about 1/1000 of it compressed)."""

    class Zeros(io.RawIOBase):
        def __init__(self, n):
            self.n = n

        def readable(self):
            return True

        def readinto(self, b):
            k = min(len(b), self.n)
            b[:k] = bytes(k)
            self.n -= k
            return k

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9) as tar:
        tar.addfile(tarfile.TarInfo("small.txt"))
        member = tarfile.TarInfo("zeros.bin")
        member.size = size
        tar.addfile(member, io.BufferedReader(Zeros(size), 1 << 20))
    return buf.getvalue()


def test_a_gzip_bomb_is_refused_before_much_is_written(tmp_path, monkeypatch):
    from raynb.cluster.head.job_archive import ArchiveRefused, unpack

    bomb = _bomb(1 << 30)
    assert len(bomb) < 4 << 20
    dest = tmp_path / "dest"
    dest.mkdir()
    t = time.perf_counter()
    with pytest.raises(ArchiveRefused, match="more than 1000000 bytes unpacked"):
        unpack(bomb, dest, max_bytes=1_000_000)
    assert time.perf_counter() - t < 2.0
    assert list(dest.iterdir()) == []  # what was written of it (small.txt) is removed
    with pytest.raises(ArchiveRefused, match="more than 10 files"):
        unpack(_many_files_archive(50), dest, max_bytes=1 << 20, max_files=10)
    assert list(dest.iterdir()) == []
    # Through the head: refused with the reason, the job's id not kept, the head answering.
    with private_cluster(tmp_path, monkeypatch, head_only=True) as (info, client, _pids):
        c = Client(info["address"], info["key"].encode(), info)
        try:
            reply = c.request(
                messages.SUBMIT_JOB,
                {"entrypoint": ["true"], "job_id": "bomb"},
                reply_types=(messages.JOB_REPLY,),
                timeout=60,
                buffers=[bomb],
            )
            assert (
                reply.msg_type == messages.ERROR
                and "bytes unpacked, over the limit" in reply.content["message"]
            )
            assert not (tmp_path / "home" / "jobs" / "bomb").exists()
            assert (
                c.request(messages.PING, {}, reply_types=(messages.PONG,), timeout=5).msg_type
                == messages.PONG
            )
        finally:
            c.close()
