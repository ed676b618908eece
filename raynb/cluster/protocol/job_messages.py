"""The rules a ``submit_job`` message's content must meet beyond its field types (the
message itself is declared in ``catalog``): checked on both sides, the client's before it
packs or sends, the head's (``cluster/head/jobs.py``) before it makes a directory."""

from __future__ import annotations

import re

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
            raise ValueError(
                f"argument {i} of the command ({arg[:40]!r}) holds a NUL character, which "
                "no program can receive (execve cuts an argument there); remove it"
            )
    for key, value in (env or {}).items():
        if not key or "=" in key or "\0" in key:
            raise ValueError(
                f"environment variable name {key[:40]!r} is not valid: a name must be non-empty, "
                "without '=' or NUL (NAME=VALUE is split at the first '=')"
            )
        if "\0" in value:
            raise ValueError(
                f"environment variable {key!r} holds a NUL character, which no program can receive; remove it"
            )
    if job_id is not None and not _JOB_ID.match(job_id):
        raise ValueError(
            f"job id {job_id[:80]!r} is not valid: a job id is {JOB_ID_RULE} (it names "
            "the job's directory); pick another or leave it out for a generated one"
        )
