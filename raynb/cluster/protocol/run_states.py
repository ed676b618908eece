"""The states of runs and jobs, declared once for every process: the head moves runs and
jobs through them, and the notebook side reads them from the head's messages and records.

The records and messages carry the plain strings (``"FINISHED"``); these enums name the
values a state may take, so code compares against a member instead of a literal that could
be misspelt. Being ``str`` subclasses, members compare equal to the strings.
"""
from __future__ import annotations

from enum import Enum


class RunState(str, Enum):
    """A run's state (the transitions are in ``head/controller.py``'s table)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    FAILING = "FAILING"
    CANCELLING = "CANCELLING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    STOPPED = "STOPPED"  # cancelled by a Tune scheduler's STOP or time budget: a trial's ordinary end


class JobState(str, Enum):
    """A ``raynb submit`` job's state."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"


# The states a run or a job ends in, as the plain strings records hold.
RUN_TERMINAL: tuple[str, ...] = tuple(s.value for s in (RunState.FINISHED, RunState.FAILED,
                                                        RunState.CANCELLED, RunState.STOPPED))
JOB_TERMINAL: tuple[str, ...] = tuple(s.value for s in (JobState.SUCCEEDED, JobState.FAILED,
                                                        JobState.STOPPED))
