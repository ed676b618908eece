"""Jobs: driver scripts the head runs for ``raynb submit`` (the role of Ray Jobs).

A job is a command (``python train.py``) the head starts as its own child, in a session
of its own, with its working directory unpacked into ``$RAYNB_HOME/jobs/<job id>/work``
(0700) and its output (stdout and stderr) appended to ``.../output.log`` (0600). It runs
whatever becomes of the client that submitted it; it ends with the head (``raynb stop``),
as a Ray job ends with its cluster. Its environment is the head's, so ``raynb.connect()``
in the driver finds this cluster (its ``RAYNB_HOME``), plus ``RAYNB_JOB_ID``.

The command runs under ``cluster/head/job_supervisor.py`` (the job's ``pid`` is the
supervisor's), a child subreaper that ends every process the job started, also those
that left its process group or session (``setsid``, a double fork), when the driver
exits, on a stop and when the head stops or dies. The id, argv and environment are
checked before anything is made (``protocol_jobs.check_submit``); a job refused for its
archive leaves no directory, so its id can be submitted again.

The head never waits on a job: exits are seen by ``poll`` on every job request, a stop
sends SIGTERM to the job's process group and SIGKILL once ``STOP_GRACE_S`` have passed
(at the next request, or when the head stops).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

from .. import settings
from ..connection_file import open_private, private_dir
from ..procutil import die_with_parent, kill_group
from ..protocol import messages
from ..protocol.job_messages import check_submit
from ..protocol.run_states import JOB_TERMINAL
from . import job_archive, job_supervisor
from .offloop import Busy, OffLoop

log = logging.getLogger("raynb.head")

# The most a working directory may hold, unpacked (bytes); the client refuses a bigger
# one before sending anything. Ray's limit for a job's working_dir is 100 MiB too.
MAX_WORKING_DIR_BYTES = settings.get("RAYNB_MAX_WORKING_DIR_BYTES")
STOP_GRACE_S = 3.0
LOG_CHUNK_BYTES = 1 << 20
# The supervisor's own grace for the job's processes after a stop, within the head's:
# it SIGKILLs every descendant (setsid'd ones too) before the head SIGKILLs the group.
SUPERVISOR_GRACE_S = STOP_GRACE_S - 1.0
TERMINAL = JOB_TERMINAL


class JobRefused(ValueError):
    """A submit_job that cannot run (bad id, bad archive, too big): the client is told why."""


def unpack(archive: bytes, dest: Path, limit: int = MAX_WORKING_DIR_BYTES) -> None:
    """Unpack a ``.tar.gz`` working directory into ``dest`` (``job_archive.unpack``: streamed,
    checked member by member, only regular files and directories inside it).

    Raises:
        JobRefused: not a gzip'd tar, a member the filter refuses, or over the limits.
    """
    try:
        job_archive.unpack(archive, dest, limit)
    except job_archive.ArchiveRefused as e:
        raise JobRefused(str(e)) from None


def _kill_tree(pid: int) -> None:
    """SIGKILL the job's supervisor, its group and every descendant (a stop's last resort:
    the supervisor, a subreaper, holds them all, also those that called ``setsid``)."""
    import psutil

    try:
        procs = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        procs = []
    kill_group(pid, signal.SIGKILL)
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


class Jobs:
    """The head's jobs, by id. Args: send: the head's ``send(identity, type, content)``;
    offloop: where working directories are unpacked (``offloop.OffLoop``; None: a pool of
    the jobs' own)."""

    def __init__(self, send, offloop: OffLoop | None = None):
        self.send = send
        self.offloop = offloop or OffLoop(threads=1)
        self._unpacking: set[str] = set()  # ids of jobs whose working directory is being unpacked
        self.jobs: dict[str, dict] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self._kill_at: dict[str, float] = {}

    def _dir(self, job_id: str) -> Path:
        return private_dir("jobs") / job_id

    # -- requests ---------------------------------------------------------------
    def on_submit_job(self, msg: messages.Message) -> None:
        """Checked and its directory made here; its working directory unpacked off the loop
        (``job_archive``), then started and answered (``_unpacked``)."""
        archive = msg.buffers[0] if msg.buffers else None
        try:
            job_id, work = self.prepare(msg.content)
            if archive is not None:
                self.offloop.submit(
                    lambda: job_archive.unpack_in_child(
                        messages.buffer_bytes(archive), work, MAX_WORKING_DIR_BYTES
                    ),
                    lambda _, error: self._unpacked(msg, job_id, error),
                )
                return self._unpacking.add(job_id)
            job = self.launch(msg.content, job_id, work)
        except (JobRefused, Busy) as e:
            return self.send(msg.identity, messages.ERROR, {"message": str(e)})
        self.send(msg.identity, messages.JOB_REPLY, {"job": job})

    def _unpacked(self, msg: messages.Message, job_id: str, error: BaseException | None) -> None:
        """(the loop) The job's working directory is unpacked, or was refused."""
        self._unpacking.discard(job_id)
        if error is None:
            return self.send(
                msg.identity,
                messages.JOB_REPLY,
                {"job": self.launch(msg.content, job_id, self._dir(job_id) / "work")},
            )
        shutil.rmtree(self._dir(job_id), ignore_errors=True)  # a refused submit leaves nothing
        text = (
            str(error)
            if isinstance(error, job_archive.ArchiveRefused)
            else f"the working directory archive cannot be unpacked: {type(error).__name__}: {error}"
        )
        self.send(msg.identity, messages.ERROR, {"message": text})

    def on_list_jobs(self, msg: messages.Message) -> None:
        self.poll()
        self.send(msg.identity, messages.JOBS_REPLY, {"jobs": [dict(j) for j in self.jobs.values()]})

    def on_job_logs(self, msg: messages.Message) -> None:
        job_id, offset = msg.content["job_id"], msg.content["offset"]
        job = self.jobs.get(job_id)
        if job is None:
            return self.send(msg.identity, messages.ERROR, {"message": self._unknown(job_id)})
        self.poll()
        state = job["state"]  # read before the log: a job that ended has all its output there
        with os.fdopen(open_private(self._dir(job_id) / "output.log", os.O_RDONLY, create=False), "rb") as f:
            f.seek(offset)
            data = f.read(LOG_CHUNK_BYTES)
        if len(data) == LOG_CHUNK_BYTES:
            state = "RUNNING" if state in TERMINAL else state  # more to read: ask again
        self.send(
            msg.identity,
            messages.JOB_LOGS_REPLY,
            {
                "job_id": job_id,
                "offset": offset + len(data),
                "text": data.decode(errors="replace"),
                "state": state,
            },
        )

    def on_stop_job(self, msg: messages.Message) -> None:
        job_id = msg.content["job_id"]
        if job_id not in self.jobs:
            return self.send(msg.identity, messages.ERROR, {"message": self._unknown(job_id)})
        self.stop(job_id)
        self.send(msg.identity, messages.JOB_REPLY, {"job": dict(self.jobs[job_id])})

    def _unknown(self, job_id: str) -> str:
        known = ", ".join(sorted(self.jobs)[-5:]) or "none"
        return f"no job {job_id!r} on this cluster (`raynb jobs list`; recent: {known})"

    # -- the jobs ---------------------------------------------------------------
    def start(self, content: dict, archive) -> dict:
        """Start a job, its working directory unpacked here; returns its record.
        Raises: JobRefused (the reason for the client). A job refused for its archive
        leaves no directory: its id can be submitted again."""
        job_id, work = self.prepare(content)
        if archive is not None:
            try:
                unpack(messages.buffer_bytes(archive), work)
            except BaseException:
                shutil.rmtree(self._dir(job_id), ignore_errors=True)  # a refused job burns no id
                raise
        return self.launch(content, job_id, work)

    def prepare(self, content: dict) -> tuple[str, Path]:
        """Check a submit (everything before the job's directory is made) and make its
        directories; returns (job id, working dir). Raises: JobRefused."""
        entrypoint = list(content["entrypoint"])
        asked = content.get("job_id")
        try:
            check_submit(entrypoint, content.get("env"), asked)
        except ValueError as e:
            raise JobRefused(str(e)) from None
        job_id = asked if asked is not None else f"job_{uuid.uuid4().hex[:10]}"
        root = self._dir(job_id)
        if job_id in self.jobs or job_id in self._unpacking or root.exists():
            raise JobRefused(f"a job {job_id!r} exists already; pick another id")
        root.mkdir(mode=0o700)
        work = root / "work"
        work.mkdir(mode=0o700)
        return job_id, work

    def launch(self, content: dict, job_id: str, work: Path) -> dict:
        """Start a prepared job's command; returns its record."""
        root, entrypoint = self._dir(job_id), list(content["entrypoint"])
        env = dict(os.environ, **dict(content.get("env") or {}), RAYNB_JOB_ID=job_id)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(work), env.get("PYTHONPATH")) if p)
        job = {
            "job_id": job_id,
            "entrypoint": entrypoint,
            "state": "RUNNING",
            "returncode": None,
            "working_dir": str(work),
            "start_time": time.time(),
            "end_time": None,
            "pid": None,
        }
        with os.fdopen(open_private(root / "output.log"), "ab") as out:
            try:
                proc = subprocess.Popen(
                    job_supervisor.command(entrypoint, SUPERVISOR_GRACE_S),
                    cwd=work,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=lambda: die_with_parent(signal.SIGTERM),
                )
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
                    _kill_tree(proc.pid)
                continue
            kill_group(proc.pid, signal.SIGKILL)  # what the driver left in its group
            del self.procs[job_id]
            stopped = self._kill_at.pop(job_id, None) is not None
            job.update(
                returncode=code,
                end_time=time.time(),
                state="STOPPED" if stopped else "SUCCEEDED" if code == 0 else "FAILED",
            )
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
