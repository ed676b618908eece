"""Jobs from the client side: ``raynb submit`` / ``raynb jobs ...`` (Ray Jobs' role).

A job is a driver command the head runs on its machine (``cluster/head/jobs.py``); it
keeps running when the client that submitted it goes away, and its output stays in the
head's ``RAYNB_HOME/jobs/<job id>/output.log`` for ``job_logs`` to read back.

The working directory is packed here (``.tar.gz``, symlinks kept as links, which the
head refuses if they point outside) and refused *before anything is sent* when its
files hold more than ``$RAYNB_MAX_WORKING_DIR_BYTES``.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path
from typing import Callable

from ..cluster import settings
from ..cluster.protocol import messages
from ..cluster.protocol.control import Client
from ..cluster.protocol.job_messages import check_submit
from ..cluster.protocol.run_states import JOB_TERMINAL as TERMINAL
from ..errors import ClusterError

EXCLUDED = {".git", "__pycache__", ".ipynb_checkpoints", ".venv", "venv", "node_modules"}


def pack_working_dir(path, limit: int | None = None) -> bytes:
    """``path`` as a gzip'd tar (its contents at the archive's top), without ``EXCLUDED``
    directories. A symbolic link (to a file or a directory) that stays inside ``path`` is
    kept as a relative link; one that points outside is refused.

    Raises:
        ValueError: ``path`` is not a directory, a link in it points outside it (the
            message names the link and its target), or its files hold more than ``limit``
            bytes (the message names the size, the limit and the biggest files).
    """
    limit = settings.get("RAYNB_MAX_WORKING_DIR_BYTES") if limit is None else limit
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ValueError(f"--working-dir {path!r} is not a directory")
    files, links = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in EXCLUDED]
        # os.walk lists a link to a directory among the directories and never enters it.
        links += [Path(dirpath) / d for d in dirnames if (Path(dirpath) / d).is_symlink()]
        for name in filenames:
            p = Path(dirpath) / name
            try:
                if p.is_symlink():
                    links.append(p)
                else:
                    files.append((p.lstat().st_size, p))
            except OSError:
                continue
    total = sum(size for size, _ in files)
    if total > limit:
        biggest = ", ".join(
            f"{p.relative_to(root)} ({size} bytes)" for size, p in sorted(files, reverse=True)[:3]
        )
        raise ValueError(
            f"the working directory {root} holds {total} bytes, over the limit of {limit} "
            f"bytes (biggest: {biggest}); nothing was sent. Leave data out of it (read it "
            "from shared storage in the job) or set RAYNB_MAX_WORKING_DIR_BYTES on both sides"
        )
    link_members = [_link_member(root, p) for p in links]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for _, p in sorted(files, key=lambda f: str(f[1])):
            tar.add(p, arcname=str(p.relative_to(root)), recursive=False)
        for member in link_members:
            tar.addfile(member)
    return buf.getvalue()


def _link_member(root: Path, link: Path) -> tarfile.TarInfo:
    """The tar member of the symbolic link ``link`` under ``root``: its target made
    relative (the head refuses absolute link targets).

    Raises:
        ValueError: the link points outside ``root`` (also through other links).
    """
    real_root = os.path.realpath(root)
    target = os.path.realpath(link)
    rel = link.relative_to(root)
    if os.path.commonpath([real_root, target]) != real_root:
        raise ValueError(
            f"the working directory {root} holds a symbolic link {str(rel)!r} -> "
            f"{os.readlink(link)!r} that points outside it ({target}); nothing was sent. "
            "Copy what it points to into the directory, or remove the link"
        )
    member = tarfile.TarInfo(str(rel))
    member.type = tarfile.SYMTYPE
    member.linkname = os.path.relpath(target, os.path.realpath(link.parent))
    member.mode = 0o777
    return member


def submit_job(
    client: Client,
    entrypoint: list[str],
    working_dir=None,
    env: dict | None = None,
    job_id: str | None = None,
) -> dict:
    """Start ``entrypoint`` (argv) on the head's machine; returns the job's record
    (``job_id``, ``state``, ``pid``, ``working_dir``, ...).

    Raises:
        ValueError: a bad command, variable or job id (``protocol_jobs.check_submit``), or
            the working directory is over the limit or links outside itself (nothing was sent).
        ClusterError: the head refused the job (the message says why).
    """
    content = {
        "entrypoint": [str(a) for a in entrypoint],
        "env": {str(k): str(v) for k, v in (env or {}).items()},
    }
    if job_id is not None:
        content["job_id"] = job_id
    check_submit(content["entrypoint"], content["env"], job_id)  # before anything is packed or sent
    buffers = [pack_working_dir(working_dir)] if working_dir is not None else []
    return _reply(
        client.request(
            messages.SUBMIT_JOB, content, reply_types=(messages.JOB_REPLY,), timeout=60.0, buffers=buffers
        )
    )["job"]


def list_jobs(client: Client) -> list[dict]:
    return _reply(client.request(messages.LIST_JOBS, {}, reply_types=(messages.JOBS_REPLY,)))["jobs"]


def stop_job(client: Client, job_id: str, timeout: float = 10.0) -> dict:
    """SIGTERM the job's process group (SIGKILL after the head's grace); waits until it
    ended, up to ``timeout`` seconds. Returns its record."""
    deadline = time.monotonic() + timeout
    while True:
        job = _reply(
            client.request(messages.STOP_JOB, {"job_id": job_id}, reply_types=(messages.JOB_REPLY,))
        )["job"]
        if job["state"] in TERMINAL or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def job_logs(
    client: Client,
    job_id: str,
    follow: bool = False,
    write: Callable[[str], object] = print,
    poll_s: float = 0.2,
) -> str:
    """Write the job's output from its start (``write`` gets each piece); with ``follow``,
    until the job ended and all of it was written. Returns the job's final state (or
    its state now, without ``follow``)."""
    offset = 0
    while True:
        c = _reply(
            client.request(
                messages.JOB_LOGS,
                {"job_id": job_id, "offset": offset},
                reply_types=(messages.JOB_LOGS_REPLY,),
            )
        )
        if c["text"]:
            write(c["text"])
        got, offset = c["offset"] - offset, c["offset"]
        if not follow or (c["state"] in TERMINAL and not got):
            return c["state"]
        if not got:
            time.sleep(poll_s)


def _reply(msg: messages.Message) -> dict:
    if msg.msg_type == messages.ERROR:
        raise ClusterError(msg.content["message"])
    return msg.content
