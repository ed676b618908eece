"""Jobs: driver scripts the head runs for ``raynb submit`` (the role of Ray Jobs).

A job is a command (``python train.py``) the head starts as its own child, in a session
of its own, with its working directory unpacked into ``$RAYNB_HOME/jobs/<job id>/work``
(0700) and its output (stdout and stderr) appended to ``.../output.log`` (0600). It runs
whatever becomes of the client that submitted it; it ends with the head (``raynb stop``),
as a Ray job ends with its cluster. Its environment is the head's, so ``raynb.connect()``
in the driver finds this cluster (its ``RAYNB_HOME``), plus ``RAYNB_JOB_ID``.

The head never waits on a job: exits are seen by ``poll`` on every job request, a stop
sends SIGTERM to the job's process group and SIGKILL once ``STOP_GRACE_S`` have passed
(at the next request, or when the head stops).
"""
from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

from .. import protocol as P
from .. import settings
from ..run_states import JOB_TERMINAL
from ..connection import open_private, private_dir
from ..procutil import die_with_parent, kill_group

log = logging.getLogger("raynb.head")

# The most a working directory may hold, unpacked (bytes); the client refuses a bigger
# one before sending anything. Ray's limit for a job's working_dir is 100 MiB too.
MAX_WORKING_DIR_BYTES = settings.get("RAYNB_MAX_WORKING_DIR_BYTES")
STOP_GRACE_S = 3.0
LOG_CHUNK_BYTES = 1 << 20
_JOB_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
TERMINAL = JOB_TERMINAL


class JobRefused(ValueError):
    """A submit_job that cannot run (bad id, bad archive, too big): the client is told why."""


def unpack(archive: bytes, dest: Path, limit: int = MAX_WORKING_DIR_BYTES) -> None:
    """Unpack a ``.tar.gz`` working directory into ``dest``: only regular files and
    directories inside it (``tarfile``'s ``"data"`` filter: no links out, no devices, no
    absolute paths), at most ``limit`` bytes in all.

    Raises:
        JobRefused: not a gzip'd tar, a member the filter refuses, or over ``limit``.
    """
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            members = tar.getmembers()
            total = sum(m.size for m in members if m.isfile())
            if total > limit:
                raise JobRefused(f"the working directory holds {total} bytes unpacked, over the "
                                 f"limit of {limit} bytes")
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError, EOFError) as e:
        raise JobRefused(f"the working directory archive cannot be unpacked: {e}") from None


class Jobs:
    """The head's jobs, by id. Args: send: the head's ``send(identity, type, content)``."""

    def __init__(self, send):
        self.send = send
        self.jobs: dict[str, dict] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self._kill_at: dict[str, float] = {}
        self.handlers = {P.SUBMIT_JOB: self.on_submit_job, P.LIST_JOBS: self.on_list_jobs,
                         P.JOB_LOGS: self.on_job_logs, P.STOP_JOB: self.on_stop_job}

    def _dir(self, job_id: str) -> Path:
        return private_dir("jobs") / job_id

    # -- requests ---------------------------------------------------------------
    def on_submit_job(self, msg: P.Message) -> None:
        try:
            job = self.start(msg.content, msg.buffers[0] if msg.buffers else None)
        except JobRefused as e:
            return self.send(msg.identity, P.ERROR, {"message": str(e)})
        self.send(msg.identity, P.JOB_REPLY, {"job": job})

    def on_list_jobs(self, msg: P.Message) -> None:
        self.poll()
        self.send(msg.identity, P.JOBS_REPLY, {"jobs": [dict(j) for j in self.jobs.values()]})

    def on_job_logs(self, msg: P.Message) -> None:
        job_id, offset = msg.content["job_id"], msg.content["offset"]
        job = self.jobs.get(job_id)
        if job is None:
            return self.send(msg.identity, P.ERROR, {"message": self._unknown(job_id)})
        self.poll()
        state = job["state"]  # read before the log: a job that ended has all its output there
        with os.fdopen(open_private(self._dir(job_id) / "output.log", os.O_RDONLY, create=False), "rb") as f:
            f.seek(offset)
            data = f.read(LOG_CHUNK_BYTES)
        if len(data) == LOG_CHUNK_BYTES:
            state = "RUNNING" if state in TERMINAL else state  # more to read: ask again
        self.send(msg.identity, P.JOB_LOGS_REPLY, {"job_id": job_id, "offset": offset + len(data),
                                                   "text": data.decode(errors="replace"), "state": state})

    def on_stop_job(self, msg: P.Message) -> None:
        job_id = msg.content["job_id"]
        if job_id not in self.jobs:
            return self.send(msg.identity, P.ERROR, {"message": self._unknown(job_id)})
        self.stop(job_id)
        self.send(msg.identity, P.JOB_REPLY, {"job": dict(self.jobs[job_id])})

    def _unknown(self, job_id: str) -> str:
        known = ", ".join(sorted(self.jobs)[-5:]) or "none"
        return f"no job {job_id!r} on this cluster (`raynb jobs list`; recent: {known})"

    # -- the jobs ---------------------------------------------------------------
    def start(self, content: dict, archive) -> dict:
        """Start a job; returns its record. Raises: JobRefused (the reason for the client)."""
        entrypoint = list(content["entrypoint"])
        if not entrypoint or not entrypoint[0]:
            raise JobRefused("submit_job needs a command: raynb submit -- python train.py")
        job_id = content.get("job_id") or f"job_{uuid.uuid4().hex[:10]}"
        if not _JOB_ID.match(job_id):
            raise JobRefused(f"job id {job_id!r} must be 1-64 letters, digits, '_', '.' or '-'")
        if job_id in self.jobs:
            raise JobRefused(f"a job {job_id!r} exists already; pick another id")
        root = self._dir(job_id)
        root.mkdir(mode=0o700)
        work = root / "work"
        work.mkdir(mode=0o700)
        if archive is not None:
            unpack(P.buffer_bytes(archive), work)
        env = dict(os.environ, **dict(content.get("env") or {}), RAYNB_JOB_ID=job_id)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(work), env.get("PYTHONPATH")) if p)
        job = {"job_id": job_id, "entrypoint": entrypoint, "state": "RUNNING", "returncode": None,
               "working_dir": str(work), "start_time": time.time(), "end_time": None, "pid": None}
        with os.fdopen(open_private(root / "output.log"), "ab") as out:
            try:
                proc = subprocess.Popen(entrypoint, cwd=work, env=env, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                        preexec_fn=lambda: die_with_parent(signal.SIGTERM))
            except OSError as e:
                job.update(state="FAILED", end_time=time.time())
                out.write(f"raynb: cannot start {entrypoint[0]!r}: {e}\n".encode())
                self.jobs[job_id] = job
                self._save(job)
                return dict(job)
        job["pid"] = proc.pid
        self.jobs[job_id], self.procs[job_id] = job, proc
        self._save(job)
        log.info("job %s started (pid %d): %s", job_id, proc.pid, " ".join(entrypoint))
        return dict(job)

    def _save(self, job: dict) -> None:
        path = self._dir(job["job_id"]) / "job.json"
        tmp = path.with_name(".job.json.tmp")
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "w") as f:
            json.dump(job, f)
        os.replace(tmp, path)

    def poll(self) -> None:
        """Record the jobs that exited; SIGKILL those stopped ``STOP_GRACE_S`` ago."""
        now = time.monotonic()
        for job_id, proc in list(self.procs.items()):
            job = self.jobs[job_id]
            code = proc.poll()
            if code is None:
                if now >= self._kill_at.get(job_id, float("inf")):
                    kill_group(proc.pid, signal.SIGKILL)
                continue
            kill_group(proc.pid, signal.SIGKILL)  # what the driver left in its group
            del self.procs[job_id]
            stopped = self._kill_at.pop(job_id, None) is not None
            job.update(returncode=code, end_time=time.time(),
                       state="STOPPED" if stopped else "SUCCEEDED" if code == 0 else "FAILED")
            self._save(job)

    def stop(self, job_id: str) -> None:
        proc = self.procs.get(job_id)
        if proc is not None and job_id not in self._kill_at:
            kill_group(proc.pid, signal.SIGTERM)
            self._kill_at[job_id] = time.monotonic() + STOP_GRACE_S
        self.poll()

    def stop_all(self, timeout: float = STOP_GRACE_S) -> None:
        """End every running job (the head is stopping): SIGTERM, then SIGKILL."""
        for job_id in list(self.procs):
            self.stop(job_id)
        deadline = time.monotonic() + timeout
        while self.procs and time.monotonic() < deadline:
            time.sleep(0.05)
            self.poll()
        for job_id in list(self.procs):
            self._kill_at[job_id] = 0.0
        self.poll()
        for proc in list(self.procs.values()):
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        self.poll()
