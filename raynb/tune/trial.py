"""A trial: one sampled config of a Tune experiment, run as one raynb run."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .report_history import ReportHistory

# Trial states, Ray 2.60's: TERMINATED is a trial that returned, or that the scheduler,
# a stopper or the time budget stopped (``extra["early_stopped"]`` says which); ERROR: it
# raised or its workers died. STOPPED is what experiments stored before read back as:
# read_state turns it into TERMINATED.
PENDING, RUNNING, PAUSED, TERMINATED, STOPPED, ERROR = (
    "PENDING",
    "RUNNING",
    "PAUSED",
    "TERMINATED",
    "STOPPED",
    "ERROR",
)


@dataclass
class Trial:
    """What the driver, the searcher, the schedulers and the table know of one trial.

    Attributes:
        trial_id (str): short unique id, e.g. ``"3f2a1_00004"``.
        config (dict): the sampled config (nested dicts as in the search space).
        status (str): one of PENDING, RUNNING, PAUSED, TERMINATED, ERROR.
        results (ReportHistory): every report, oldest first, each with
            ``training_iteration`` (1-based, counted per report), ``time_total_s``; a list
            of dicts read as a list (assigning a list makes one). Only the newest are in
            memory: the rest are read from the trial's ``result.json`` when asked for.
        checkpoint (str | None): path of the trial's latest committed checkpoint.
        path (str | None): the trial's directory.
        error (str | None): one line describing the failure when ERROR.
        run_id (str | None): the raynb run currently executing it.
    """

    trial_id: str
    config: dict
    status: str = PENDING
    results: ReportHistory = field(default_factory=ReportHistory)
    checkpoint: str | None = None
    path: str | None = None
    error: str | None = None
    run_id: str | None = None
    extra: dict = field(default_factory=dict)  # scheduler/searcher bookkeeping

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "results" and not isinstance(value, ReportHistory):
            value = ReportHistory(value)
        object.__setattr__(self, name, value)
        if name == "results":
            value.bind(self)
        elif name == "path" and isinstance(self.__dict__.get("results"), ReportHistory):
            self.results.bind(self)  # a directory now holds what memory need not

    @property
    def last_result(self) -> dict:
        return self.results[-1] if self.results else {}

    @property
    def trainable_name(self) -> str:
        """The trainable's name (the function's, or ``TorchTrainer``), as in Ray's Trial."""
        return self.extra.get("trainable_name", "trainable")

    def __str__(self) -> str:
        """``TuneConfig(trial_name_creator=...)``'s name, else ``<trainable>_<trial_id>``."""
        return self.extra.get("name") or f"{self.trainable_name}_{self.trial_id}"

    def metric(self, name: str, default: Any = None) -> Any:
        return self.last_result.get(name, default)


def pause(trial: Trial) -> str:
    """The state of a trial an interrupt cancelled: PAUSED (it resumes from its checkpoint
    or starts over when ``fit()`` carries on), or PENDING when its run never started (it
    was waiting for workers): nothing of it ran, and the table must not say it did.
    Returns the state it set."""
    started = trial.results or trial.checkpoint or trial.extra.get("started_at") is not None
    if started:
        trial.status = PAUSED
        return PAUSED
    trial.status = PENDING
    trial.run_id = None
    if trial.path:
        trial.extra["_wipe"] = True  # its cancelled run's directory: removed when fit() carries on
    return PENDING


def requeue(t: Trial, from_checkpoint: bool, wipe: bool = True) -> None:
    """Make a restored trial PENDING. With a checkpoint its run resumes from it (the head
    continues the run: its reports so far stay, training_iteration counts on); without
    one (or with ``from_checkpoint=False``) its directory is removed and it starts over.
    ``wipe=False`` only marks the directory for removal when ``fit()`` starts (restore()
    itself must not delete anything: ``Tuner.restore(...).get_results()`` only reads)."""
    t.status = PENDING
    t.run_id = None
    if from_checkpoint and t.checkpoint and Path(t.checkpoint).is_dir():
        return
    t.checkpoint = None
    t.results = ReportHistory()
    if t.path and wipe:
        shutil.rmtree(t.path, ignore_errors=True)
    elif t.path:
        t.extra["_wipe"] = True
