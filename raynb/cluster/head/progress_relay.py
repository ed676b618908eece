"""What the head relays of the ranks' reports: rank 0's in full, the others as a counter.

The client shows rank 0's metrics (the progress pane's latest values and history,
``Result.metrics``, the callbacks) and, for every rank, only how far it got (its
progress bar: reports made, and the ``epoch`` / ``step`` of its last report). Relaying
every rank's whole report (each re-signed, sent and verified again) cost the head and
the client CPU on every report for values nobody displays. So a report of a
rank other than 0 is folded into a compact ``progress`` event::

    {"kind": "progress", "ranks": {"1": {"reports": 12, "epoch": 2}, "2": {...}}}

sent before the run's next event (rank 0's next report, a state change, a note) or by
the head's tick once ``EVERY_S`` passed since the last one, whichever comes first; the
latest value per rank wins. (The head ticks after every drain of its socket: flushing
there sent a warm re-run's client two or three counters, one per rank finishing, each a
message to sign, send, wake for and verify; now they ride with the run's end.)
"""

from __future__ import annotations

import time
from typing import Callable

from .run import Run

# The most often a run's counters go out on their own (s): a progress bar's 10 Hz.
EVERY_S = 0.1


def relay(run: Run, rank: int, event: dict, emit: Callable[[Run, dict], None]) -> None:
    """Rank ``rank``'s report ``event`` (as the store recorded it): rank 0's is emitted
    whole, another rank's is folded into the pending progress event (:func:`note`).

    Rank 0's says ``checkpoint_staged`` when its report carries a checkpoint that will
    commit once the ranks behind reach it: a Tune STOP on it waits for that commit
    (``tune.held_stops``)."""
    if rank == 0:
        if _commit_to_come(run, run.report_counts.get(0, 0)):
            event["checkpoint_staged"] = True
        emit(run, event)
    else:
        note(run, rank, event["metrics"])


def _commit_to_come(run: Run, index: int) -> bool:
    """Whether the checkpoint staged for report ``index`` of this attempt (if any) can still
    commit: every rank behind is running and reports (one that returned, or that has not
    reported in this attempt, as with ``if rank == 0: report(..., checkpoint=...)``, may
    never reach it; then a STOP waiting for it would only wait)."""
    if index not in run.staged:
        return False
    behind = [r for r in range(1, run.world_size) if run.report_counts.get(r, 0) < index]
    return all(r not in run.done and run.report_counts.get(r, 0) > 0 for r in behind)


def note(run: Run, rank: int, metrics: dict) -> None:
    """Fold a report of rank ``rank`` (its ``metrics``) into the run's pending progress
    event; ``reports`` counts the rank's reports over all the run's attempts."""
    count = run.rank_reports[rank] = run.rank_reports.get(rank, 0) + 1
    entry = {"reports": count}
    for key in ("epoch", "step"):
        value = metrics.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            entry[key] = value
    run.pending_progress[str(rank)] = entry


def flush(run: Run, emit: Callable[[Run, dict], None], due_only: bool = False) -> None:
    """``emit(run, event)`` the pending ``progress`` event of ``run``, if there is one
    (``due_only``: only once ``EVERY_S`` passed since the last)."""
    if not run.pending_progress:
        return
    now = time.monotonic()
    if due_only and now - run.progress_sent < EVERY_S:
        return
    ranks, run.pending_progress = run.pending_progress, {}
    run.progress_sent = now
    emit(run, {"kind": "progress", "ranks": ranks})
