"""Describing a run's failures: the cause among its ranks' errors, and one-line texts
for the restart notes and the final error (used by ``controller``)."""

from __future__ import annotations

from .run import Run


def unsaved_checkpoints(run: Run) -> str:
    """What a restart note adds when the failed attempt reported checkpoints that were never
    committed because some ranks had not made those reports. Without it the note said "no
    checkpoint yet, starting over" to a user whose rank 0 had reported several (the common
    ``if rank == 0: report(..., checkpoint=...)`` pattern), with no word of why they were lost."""
    if not run.staged:
        return ""
    first = min(run.staged)
    behind = [r for r in range(run.world_size) if run.report_counts.get(r, 0) < first]
    text = (
        f" ({len(run.staged)} reported checkpoint(s) were not saved: rank(s) "
        f"{', '.join(map(str, behind))} had not made report {first}"
    )
    if any(run.report_counts.get(r, 0) == 0 for r in behind):
        text += (
            "; a checkpoint is saved once every rank has made the report that carries it, "
            "so call report() on every rank, passing checkpoint=None where there is none"
        )
    return text + ")"


def primary_error(errors: list) -> dict:
    """The failure that caused the others: a dead rank before the exceptions its
    peers then raised (a collective with a dead peer fails on every rank)."""
    for e in errors:
        if e.get("node_id"):  # a node lost: its ranks' deaths and their peers' errors follow
            return e
    for e in errors:
        if e.get("signal") or e.get("exitcode") is not None:
            return e
    return errors[0] if errors else {"message": "failed"}


def describe_cause(e: dict) -> str:
    """'rank 2 died, SIGKILL', 'rank 0 exited with code 3', 'rank 1 raised ValueError: boom'."""
    if e.get("node_id") and not e.get("signal"):
        return f"node {e['node_id']} lost (rank {e.get('rank')} was there: {e.get('why', 'no heartbeat')})"
    if e.get("signal"):
        return f"rank {e.get('rank')} died, {e['signal']}"
    if e.get("exitcode") is not None:
        return f"rank {e.get('rank')} exited with code {e['exitcode']}"
    if e.get("exc_type"):
        return f"rank {e.get('rank')} raised {e['exc_type']}: {e.get('message', '')}"
    return e.get("message", "failed")


def error_summary(errors: list) -> str | None:
    """One line naming the first failure, e.g. 'rank 2 raised ValueError: boom'."""
    if not errors:
        return None
    e = errors[0]
    if e.get("exc_type"):
        line = f"rank {e.get('rank')} raised {e['exc_type']}: {e.get('message', '')}"
    else:
        line = e.get("message", "")
    return line + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else "")
