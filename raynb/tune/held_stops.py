"""A scheduler's STOP that waits for the checkpoint of the report it was decided on.

The head relays rank 0's report as soon as it arrives, and the scheduler decides on it
then; the checkpoint that report carries commits only once every rank has reached it
(a checkpoint may hold every rank's files). A cancel sent at once can cut a slower rank
short of that report, and the checkpoint is lost: ASHA stops a trial at ``max_t`` on
its last report, which is the one that carries XGBoostTrainer's final model. Ray Tune
never sees a result before every rank reported it, so its STOP keeps that checkpoint;
here the cancel is held until the head says it committed (the ``checkpoint`` event),
the run ends by itself, or :data:`COMMIT_WAIT_S` passed.
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

    def __init__(self, cancel: Callable[[str], None], note: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic):
        self._cancel, self._note, self._clock = cancel, note, clock
        self._held: dict[str, tuple[float, str]] = {}  # run_id -> (deadline, trial_id)

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._held

    def hold(self, run_id: str, trial_id: str) -> None:
        """Hold the cancel of ``run_id`` until its next checkpoint commits."""
        self._held[run_id] = (self._clock() + COMMIT_WAIT_S, trial_id)

    def committed(self, run_id: str) -> None:
        """A checkpoint of ``run_id`` committed: send its held cancel, if it has one."""
        if self._held.pop(run_id, None) is not None:
            self._cancel(run_id)

    def ended(self, run_id: str) -> None:
        """``run_id`` ended by itself: nothing is left to cancel."""
        self._held.pop(run_id, None)

    def release_all(self) -> None:
        """Send every held cancel now (the time budget is spent, or an interrupt)."""
        for run_id in list(self._held):
            self._held.pop(run_id)
            self._cancel(run_id)

    def release_due(self) -> None:
        """Send the held cancels whose wait is over, saying the checkpoint was not kept."""
        now = self._clock()
        for run_id, (deadline, trial_id) in list(self._held.items()):
            if now >= deadline:
                del self._held[run_id]
                self._note(f"{trial_id}: stopped without the checkpoint of its last report: a rank "
                           f"had not reached that report {COMMIT_WAIT_S:g} s after rank 0")
                self._cancel(run_id)
