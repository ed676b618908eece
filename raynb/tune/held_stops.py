"""A scheduler's STOP that waits for the checkpoint of the report it was decided on.

The head relays rank 0's report as soon as it arrives, and the scheduler decides on it
then; the checkpoint that report carries commits only once every rank has reached it
(a checkpoint may hold every rank's files). A cancel sent at once can cut a slower rank
short of that report, and the checkpoint is lost: ASHA stops a trial at ``max_t`` on
its last report, which is the one that carries XGBoostTrainer's final model. Ray Tune
never sees a result before every rank reported it, so its STOP keeps that checkpoint;
here the cancel is held until the head says it committed (the ``checkpoint`` event),
the run ends by itself, or :data:`COMMIT_WAIT_S` passed. The head flags such a report
(``checkpoint_staged``, ``head.progress_relay``) only when the ranks behind still run and
report; a checkpoint staged by a rank other than 0 after rank 0's report is not waited for.
"""

from __future__ import annotations

import time
from typing import Callable

# How long a STOP waits for its report's checkpoint to commit (s). Ranks in one process
# group reach a report within a step of each other; past this one is stuck or far
# behind, and the trial is stopped without the checkpoint (a note says so).
COMMIT_WAIT_S = 10.0


class HeldStops:
    """The runs whose cancel waits for a checkpoint commit, by ``run_id``.

    Args:
        cancel: ``cancel(run_id)`` sends the run's cancel (a Tune STOP) to the head.
        note: ``note(text)`` tells the user (the progress pane's notes).
        clock: ``time.monotonic`` (injectable for tests).
    """

    def __init__(
        self,
        cancel: Callable[[str], None],
        note: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ):
        self._cancel, self._note, self._clock = cancel, note, clock
        self._held: dict[str, tuple[float, str, int]] = {}  # run_id -> (deadline, trial_id, iteration)

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._held

    def hold(self, run_id: str, trial_id: str, iteration: int) -> None:
        """Hold the cancel of ``run_id`` until the checkpoint of its report ``iteration``
        (``training_iteration``, 1-based) commits."""
        self._held[run_id] = (self._clock() + COMMIT_WAIT_S, trial_id, iteration)

    def committed(self, run_id: str, iteration: int | None) -> None:
        """The checkpoint of report ``iteration`` of ``run_id`` committed: send the held
        cancel if that is the report (or a later one) it waits for. An older report's
        commit (a rank more than one checkpoint behind) leaves it held; None (unknown)
        releases it."""
        held = self._held.get(run_id)
        if held is not None and (iteration is None or iteration >= held[2]):
            self.release(run_id)

    def release(self, run_id: str) -> None:
        """Send the held cancel of ``run_id`` now, if it has one (its run restarted: what it
        waited for was discarded with the failed attempt)."""
        if self._held.pop(run_id, None) is not None:
            self._cancel(run_id)

    def ended(self, run_id: str, failed: bool = False) -> bool:
        """``run_id`` ended by itself: nothing is left to cancel. Returns whether its stop
        was still held: then it ended as stopped, even ``failed`` (a rank's error after the
        STOP, which a cancel sent at once would have cut short; Ray Tune never runs a
        stopped trial on). A note says so; the run's own record keeps the error."""
        held = self._held.pop(run_id, None)
        if held is not None and failed:
            self._note(
                f"{held[1]}: a rank failed while its STOP waited for the checkpoint of report "
                f"{held[2]}; the trial ends as stopped (the error is in its run's run.json)"
            )
        return held is not None

    def release_all(self) -> None:
        """Send every held cancel now (the time budget is spent, or an interrupt)."""
        for run_id in list(self._held):
            self.release(run_id)

    def release_due(self) -> None:
        """Send the held cancels whose wait is over, saying the checkpoint was not kept."""
        now = self._clock()
        for run_id, (deadline, trial_id, iteration) in list(self._held.items()):
            if now >= deadline:
                self._note(
                    f"{trial_id}: stopped without the checkpoint of report {iteration}, the one "
                    f"it was stopped on: a rank had not reached it {COMMIT_WAIT_S:g} s after rank 0"
                )
                self.release(run_id)
