"""The messages of jobs (``raynb submit``, ``cluster/head/jobs.py``) and of launchers'
node events (``node_lost``, ``cluster/head/addons.py``): their names, directions and
schemas, which ``protocol`` imports into its ``MESSAGE_TYPES`` and ``SCHEMAS``."""
from __future__ import annotations

import re

from .schema import Int, ListOf, MapOf, Record

# client -> head
NODE_LOST = "node_lost"          # {"node_id", "reason"}: a launcher saw the node die (Ray's node events)
SUBMIT_JOB = "submit_job"        # {"entrypoint": [argv], "env"?, "job_id"?}; buffers[0]? = working dir (.tar.gz)
LIST_JOBS = "list_jobs"          # {}
JOB_LOGS = "job_logs"            # {"job_id", "offset"}: the job's output from byte ``offset``
STOP_JOB = "stop_job"            # {"job_id"}
# head -> client
NODE_LOST_REPLY = "node_lost_reply"  # {"known": bool}
JOB_REPLY = "job_reply"          # {"job": {...}}: answer to submit_job / stop_job
JOBS_REPLY = "jobs_reply"        # {"jobs": [{...}, ...]}
JOB_LOGS_REPLY = "job_logs_reply"  # {"job_id", "text", "offset", "state"}

JOB_SCHEMAS: dict[str, Record] = {
    NODE_LOST: Record({"node_id": str, "reason": str}),
    NODE_LOST_REPLY: Record({"known": bool}),
    SUBMIT_JOB: Record({"entrypoint": ListOf(str), "env?": MapOf(str), "job_id?": (str, None)}),
    LIST_JOBS: Record(),
    JOB_LOGS: Record({"job_id": str, "offset": Int(0)}),
    STOP_JOB: Record({"job_id": str}),
    JOB_REPLY: Record({"job": dict}),
    JOBS_REPLY: Record({"jobs": ListOf(dict)}),
    JOB_LOGS_REPLY: Record({"job_id": str, "text": str, "offset": Int(0), "state": str}),
}


# A job id names the job's directory under $RAYNB_HOME/jobs: no separator, no "." or ".."
# (so no leading dot at all), bounded length.
JOB_ID_RULE = "1-64 letters, digits, '_', '.' or '-', not starting with '.'"
_JOB_ID = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$")


def check_submit(entrypoint: list, env: dict | None, job_id: str | None) -> None:
    """Why a ``submit_job`` cannot run, checked on both sides before anything is made
    (the client before it packs or sends, the head before it makes a directory).

    Args:
        entrypoint: the command's argv (str each).
        env: variables added to the job's environment, or None.
        job_id: the id asked for, or None for one the head picks.

    Raises:
        ValueError: an empty command, a NUL in an argument or variable (``execve`` takes
            C strings: it would be cut there), a variable name that is empty or holds
            ``=``, or a bad job id; the message names the item and the rule.
    """
    if not entrypoint or not entrypoint[0]:
        raise ValueError("submit_job needs a command: raynb submit -- python train.py")
    for i, arg in enumerate(entrypoint):
        if "\0" in arg:
            raise ValueError(f"argument {i} of the command ({arg[:40]!r}) holds a NUL character, which "
                             "no program can receive (execve cuts an argument there); remove it")
    for key, value in (env or {}).items():
        if not key or "=" in key or "\0" in key:
            raise ValueError(f"environment variable name {key[:40]!r} is not valid: a name must be non-empty, "
                             "without '=' or NUL (NAME=VALUE is split at the first '=')")
        if "\0" in value:
            raise ValueError(f"environment variable {key!r} holds a NUL character, which no program can "
                             "receive; remove it")
    if job_id is not None and not _JOB_ID.match(job_id):
        raise ValueError(f"job id {job_id[:80]!r} is not valid: a job id is {JOB_ID_RULE} (it names "
                         "the job's directory); pick another or leave it out for a generated one")
