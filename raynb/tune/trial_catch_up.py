"""What became of a trial whose kernel died mid-fit, read from its run's own ``run.json``
(for ``Tuner.restore``)."""
from __future__ import annotations

from ..cluster.storage.rundir import read_run_dir
from .trial import ERROR, TERMINATED, Trial


def catch_up(t: Trial) -> None:
    """A trial the state file says is RUNNING: its kernel died mid-fit, and its run went on
    on the head (runs outlive the kernel). The run's own ``run.json`` (written by the head)
    tells how far it got: a run that FINISHED meanwhile is TERMINATED with its results (it
    used to be requeued, its directory removed and the trial run again from scratch), one
    that raised is ERROR; a live one stays RUNNING (an orphan to cancel) with its newest
    checkpoint, so the requeue resumes from that rather than from the stale one recorded
    here (which ``num_to_keep`` may have pruned meanwhile)."""
    if not t.path:
        return
    try:
        record = read_run_dir(t.path, with_reports=False)
    except (OSError, ValueError):
        return  # nothing readable: requeued as before
    checkpoints = record.get("checkpoints") or []
    if checkpoints:
        t.checkpoint = checkpoints[-1]["path"]
        t.extra["checkpoints"] = checkpoints
    if record.get("failures"):
        t.extra["failures"] = record["failures"]
    state = record.get("state")
    if state == "FINISHED":
        t.status = TERMINATED
    elif state == "STOPPED":   # a scheduler's STOP landed after the kernel died: Ray's TERMINATED
        t.status = TERMINATED
    elif state == "FAILED" and not _head_died(record):
        t.status = ERROR
        errors = record.get("errors") or [{"message": "failed"}]
        t.extra["errors"] = errors
        e = errors[0]
        t.error = (f"{e['exc_type']}: {e.get('message', '')}" if e.get("exc_type")
                   else str(e.get("message", "failed"))).splitlines()[0][:300]


def _head_died(record: dict) -> bool:
    """The run failed because the head running it died, or the cluster was stopped under it
    (``raynb stop``, a reboot's SIGTERM): resumable, not the trial's error."""
    said = [str(e.get("message", "")) for e in (record.get("failures") or []) + (record.get("errors") or [])
            if isinstance(e, dict)]
    return any("head stopped" in m or "cluster was stopped" in m for m in said)
