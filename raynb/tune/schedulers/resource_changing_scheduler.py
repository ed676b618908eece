"""``ResourceChangingScheduler`` (Ray Tune's name): a wrapper that, in Ray, lets a function
change a running trial's resources. raynb runs each trial on the workers it started with
(one warm worker per rank; a trial's workers cannot grow or shrink while it runs), so the
wrapper runs every trial with its fixed resources, makes every decision through its
``base_scheduler``, and says so once. The allocation function is kept, never called.
"""

from __future__ import annotations

import sys

from .fifo import FIFOScheduler
from .trial_scheduler import TrialScheduler

_NOTED: list = []


class ResourceChangingScheduler(TrialScheduler):
    """Run ``base_scheduler`` with each trial's resources fixed (Ray's class of this name).

    Args:
        base_scheduler (TrialScheduler | None): makes the decisions; None: FIFO.
        resources_allocation_function (callable | None): Ray's
            ``f(tune_controller, trial, result, scheduler) -> PlacementGroupFactory | None``;
            accepted and not called: resources do not change on raynb.

    Raises:
        TypeError: ``base_scheduler`` is not a raynb scheduler, or the allocation function
            is not callable.
    """

    def __init__(self, base_scheduler: TrialScheduler | None = None, resources_allocation_function=None):
        base = base_scheduler if base_scheduler is not None else FIFOScheduler()
        if not isinstance(base, TrialScheduler):
            raise TypeError(
                "ResourceChangingScheduler(base_scheduler=...) takes a raynb.tune.schedulers scheduler "
                f"(e.g. ASHAScheduler()), got {type(base).__name__}"
            )
        if resources_allocation_function is not None and not callable(resources_allocation_function):
            raise TypeError(
                "ResourceChangingScheduler(resources_allocation_function=...) takes a function, got "
                f"{type(resources_allocation_function).__name__}"
            )
        super().__init__()
        self._base_scheduler = base
        self._resources_allocation_function = resources_allocation_function
        self._base_trial_resources = None  # Ray's attribute, read by allocation functions
        if not _NOTED:
            _NOTED.append(True)
            print(
                "raynb: ResourceChangingScheduler: resources_allocation_function is not called. Ray calls "
                "it after each result and, when it returns other resources, pauses the trial at its "
                "checkpoint and restarts it with them; here each trial keeps its one warm worker and its "
                "torch threads (with_resources' CPUs, else its share of the node's cores) to its end. "
                "Every scheduling decision is the base scheduler's, as in Ray",
                file=sys.stderr,
            )

    @property
    def base_scheduler(self) -> TrialScheduler:
        return self._base_scheduler

    @property
    def metric(self):
        return self._base_scheduler.metric

    @property
    def mode(self):
        return self._base_scheduler.mode

    @property
    def time_attr(self):
        return self._base_scheduler.time_attr

    def set_search_properties(self, metric, mode) -> bool:
        return self._base_scheduler.set_search_properties(metric, mode)

    def validate(self) -> None:
        self._base_scheduler.validate()

    def on_trial_add(self, trial) -> None:
        self._base_scheduler.on_trial_add(trial)

    def on_trial_result(self, trial, result: dict):
        return self._base_scheduler.on_trial_result(trial, result)

    def on_trial_complete(self, trial, result: dict) -> None:
        self._base_scheduler.on_trial_complete(trial, result)

    def on_trial_error(self, trial) -> None:
        self._base_scheduler.on_trial_error(trial)

    def on_trial_remove(self, trial) -> None:
        self._base_scheduler.on_trial_remove(trial)

    def reached_budget(self, trial, result: dict) -> bool:
        return self._base_scheduler.reached_budget(trial, result)

    def choose_trial_to_run(self, pending: list):
        return self._base_scheduler.choose_trial_to_run(pending)

    def debug_string(self) -> str:
        return f"{self._base_scheduler.debug_string()} (resources fixed: ResourceChangingScheduler)"
