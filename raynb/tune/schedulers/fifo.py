"""FIFOScheduler: run trials in the order they were created, never stop one early."""

from __future__ import annotations

from .trial_scheduler import TrialScheduler


class FIFOScheduler(TrialScheduler):
    """The default scheduler (Ray Tune's ``FIFOScheduler``): every trial runs to completion.

    Args:
        metric (str | None): unused, accepted for symmetry with the other schedulers.
        mode (str | None): "min" or "max" (unused).

    Raises:
        ValueError: ``mode`` is not "min"/"max".
    """

    def __init__(self, metric: str | None = None, mode: str | None = None):
        super().__init__(metric, mode)

    def debug_string(self) -> str:
        return "Using FIFO scheduling algorithm."
