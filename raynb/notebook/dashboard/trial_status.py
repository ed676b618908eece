"""A Tune trial's status on the dashboard: the one the notebook shows, not its run's state.

The head knows a trial only as a run, whose end state says how the run ended: a trial
stopped at ``max_t`` or by a stopper ends its run STOPPED, a FIFO trial's run FINISHED,
and the notebook (as Ray Tune) calls both TERMINATED. The driver writes each trial's
status to ``<experiment>/experiment_state.json`` (``tune.experiment_state``); the
dashboard reads it from there, and where it is missing or unreadable (a remote head's
storage, an experiment still starting) maps the run's state as the driver would.

Each run of a trial gets ``trial_status`` and ``experiment_path`` (its experiment's
directory: the key the page groups the trials under).
"""

from __future__ import annotations

import json
import os

STATE_FILE = "experiment_state.json"  # tune.experiment_state.STATE_FILE (not imported: no Tune here)
# Run state -> the trial status the driver gives it (tune/controller.py's _on_done). A run
# CANCELLED was interrupted with its experiment (PAUSED) unless the driver says otherwise.
FROM_RUN_STATE = {
    "PENDING": "PENDING",
    "RUNNING": "RUNNING",
    "CANCELLING": "RUNNING",
    "FAILING": "RUNNING",
    "FINISHED": "TERMINATED",
    "STOPPED": "TERMINATED",
    "FAILED": "ERROR",
    "CANCELLED": "PAUSED",
}
# A state file beyond this is not read (the fallback mapping is used): it is read on the
# gateway's thread at every poll of the page that changed it.
MAX_STATE_BYTES = 64 << 20


def _from_run(run: dict) -> str:
    state = run.get("state")
    if state == "CANCELLED" and not run.get("started"):
        return "PENDING"  # interrupted before it started: fit() runs it when it carries on
    return FROM_RUN_STATE.get(state, state)


class TrialStatuses:
    """Reads experiment state files, each again only when it changed (size, mtime)."""

    def __init__(self):
        self._cache: dict[str, tuple[tuple, dict]] = {}

    def annotate(self, runs: list[dict]) -> list[dict]:
        """``runs`` (the head's summaries), each trial's with ``trial_status`` and
        ``experiment_path`` added; other runs unchanged."""
        seen = set()
        for run in runs:
            if not run.get("experiment") or not run.get("path"):
                continue
            exp = os.path.dirname(os.path.normpath(run["path"]))
            seen.add(exp)
            by_run = self._statuses(exp)
            live = run.get("state") in ("PENDING", "RUNNING", "CANCELLING", "FAILING")
            # A live run is what the page must show live; the driver's file lags it by a batch.
            status = None if live else by_run.get(run.get("run_id"))
            run["trial_status"] = status or _from_run(run)
            run["experiment_path"] = exp
        for gone in set(self._cache) - seen:
            del self._cache[gone]
        return runs

    def _statuses(self, experiment_path: str) -> dict:
        """``{run_id: status}`` of the trials ``experiment_state.json`` lists; {} without one."""
        path = os.path.join(experiment_path, STATE_FILE)
        try:
            st = os.stat(path)
        except OSError:
            return {}
        key = (st.st_size, st.st_mtime_ns)
        cached = self._cache.get(experiment_path)
        if cached is not None and cached[0] == key:
            return cached[1]
        statuses: dict = {}
        if st.st_size <= MAX_STATE_BYTES:
            try:
                with open(path, encoding="utf-8") as f:
                    trials = json.load(f).get("trials") or []
                statuses = {t["run_id"]: t["status"] for t in trials if t.get("run_id") and t.get("status")}
            except (OSError, ValueError, AttributeError, TypeError):
                statuses = {}  # being replaced, or not ours: the mapping stands in
        self._cache[experiment_path] = (key, statuses)
        return statuses
