"""A run as the head keeps it: what was asked (``spec``), where it runs (``ranks``),
how its current attempt goes (``done``, ``errors``, reports, staged checkpoints), and
its history (failures, timings). ``controller`` moves it between states; ``store``
keeps its files; ``summary()`` is what ``run.json`` and ``raynb.runs()`` show.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..protocol.run_states import RUN_TERMINAL
from ..storage.checkpoints import CheckpointStore
from ..storage.rundir import RunDirectory
from ..storage.storage_uri import join_uri

# States a run ends in; the others are PENDING, RUNNING, FAILING and CANCELLING (controller.py).
TERMINAL = RUN_TERMINAL
# A run's record keeps its first FAILURES_HEAD failures and the latest, FAILURES_KEPT in all.
FAILURES_HEAD, FAILURES_KEPT = 10, 100


@dataclass
class Run:
    run_id: str
    name: str
    client: bytes
    spec: dict
    payload: list
    rundir: RunDirectory
    state: str = "PENDING"
    ranks: list = field(default_factory=list)  # worker_id by rank
    done: dict = field(default_factory=dict)  # rank -> status
    errors: list = field(default_factory=list)
    result: list = field(default_factory=list)  # rank 0's return value frames
    submitted: float = field(default_factory=time.time)
    started: float | None = None
    ended: float | None = None
    deadline: float | None = None  # when unfinished ranks get killed
    stopping_since: float | None = None  # when its ranks were asked to stop
    gpu_ids: dict = field(default_factory=dict)  # rank -> (node_id, CUDA device index)
    reports: int = 0
    last_metrics: dict = field(default_factory=dict)
    # fault tolerance and checkpoints
    attempt: int = 0  # restarts so far
    failures: list = field(default_factory=list)  # the cause of each failed attempt
    # Failures of earlier fits of a resumed run (and the head's death under it): kept in
    # ``failures``, but not counted against this fit's FailureConfig(max_failures).
    failures_before: int = 0
    failures_dropped: int = 0  # left out of ``failures`` (see add_failure)
    store: CheckpointStore | None = None
    report_counts: dict = field(default_factory=dict)  # rank -> reports this attempt
    staged: dict = field(default_factory=dict)  # report index -> {rank: staged dir}
    rank0_metrics: dict = field(default_factory=dict)  # report index -> rank 0's metrics
    followers: set = field(default_factory=set)  # clients attached besides the submitter
    archived: bool = False  # read back from disk, not run by this head
    peaks: dict = field(default_factory=dict)  # rank -> {"rss", "gpu_mem_used"}: bytes, highest seen
    write_error: str | None = None  # a file of it could not be written: it fails
    stop_requested: bool = False  # the cancel is a Tune STOP: it ends STOPPED
    pending_progress: dict = field(default_factory=dict)  # str(rank) -> its counter, not sent yet
    progress_sent: float = 0.0  # monotonic time the last counters went out (progress_relay)
    rank_reports: dict = field(default_factory=dict)  # rank -> reports, all attempts (progress_relay)
    blocked: set = field(default_factory=set)  # ranks still inside a call after their cancel

    @property
    def world_size(self) -> int:
        """Ranks of this attempt: ``num_workers``, or as many as an elastic run was given
        (its max until it is placed)."""
        if self.ranks and self.spec.get("min_workers") is not None:
            return len(self.ranks)
        return int(self.spec["num_workers"])

    @property
    def num_failures(self) -> int:
        return len(self.failures) + self.failures_dropped

    def add_failure(self, cause: dict) -> None:
        """Record a failed attempt. With unlimited restarts a function that fails at once
        restarts ~100 times a second: keeping every failure (traceback and all) grew the
        head's memory without bound and rewrote them all into run.json at each restart
        (O(n^2) writes, the head stalling). The first FAILURES_HEAD and the latest are kept;
        the rest are counted."""
        self.failures.append(cause)
        if len(self.failures) > FAILURES_KEPT:
            del self.failures[FAILURES_HEAD]
            self.failures_dropped += 1

    def observe(self, rank: int, stats: dict) -> None:
        """Keep rank ``rank``'s highest RSS and GPU memory (a node agent's sample)."""
        peak = self.peaks.setdefault(rank, {})
        for key in ("rss", "gpu_mem_used"):
            value = stats.get(key)
            if isinstance(value, int) and value > peak.get(key, -1):
                peak[key] = value

    @property
    def max_failures(self) -> int:
        return int(self.spec.get("max_failures") or 0)

    def checkpoint_path(self, name: str) -> str:
        """Where a client finds checkpoint ``name``: ``<storage URI>/<run name>/<name>``
        when the run stores them at a URI (``head.uploads``), else the run directory's."""
        uri = self.spec.get("storage_uri")
        return join_uri(uri, self.name, name) if uri else str(self.rundir.path / name)

    def summary(self) -> dict:
        """What ``raynb.runs()`` lists and ``run.json`` holds."""
        return {
            "run_id": self.run_id,
            "name": self.name,
            "state": self.state,
            "path": str(self.rundir.path),
            "world_size": self.world_size,
            **self._elastic_sizes(),
            "use_gpu": bool(self.spec.get("use_gpu")),
            "submitted": self.submitted,
            "started": self.started,
            "ended": self.ended,
            "attempt": self.attempt,
            "max_failures": self.max_failures,
            "failures": self.failures,
            "num_failures": self.num_failures,
            "errors": self.errors if self.state == "FAILED" else [],
            "metrics": self.last_metrics,
            "num_reports": self.reports,
            "checkpoints": [
                {k: c[k] for k in ("index", "name", "metrics")}
                for c in (self.store.records() if self.store else [])
            ],
            "checkpoint_config": self.spec.get("checkpoint_config"),
            "timeout_s": self.spec.get("timeout_s"),
            "kind": self.spec.get("name_prefix"),
            "peak_resources": {str(r): p for r, p in sorted(self.peaks.items())},
            "experiment": self.spec.get("experiment"),
            "storage_uri": self.spec.get("storage_uri"),
        }

    def _elastic_sizes(self) -> dict:
        """An elastic run's (min, max) and resize interval, so that a restore of it is elastic
        too (``TorchTrainer.restore``, ``%%ray_train --resume``); nothing for a fixed run."""
        if self.spec.get("min_workers") is None:
            return {}
        return {
            "min_workers": self.spec["min_workers"],
            "max_workers": int(self.spec["num_workers"]),
            "elastic_resize_monitor_interval_s": self.spec.get("elastic_resize_monitor_interval_s", 60.0),
        }

    def done_content(self) -> dict:
        """The ``run_done`` message its clients get when it ends."""
        return {
            "run_id": self.run_id,
            "name": self.name,
            "state": self.state,
            "errors": self.errors,
            "path": str(self.rundir.path),
            "metrics": self.last_metrics,
            "time_total_s": (self.ended - (self.started or self.submitted)),
            "failures": self.failures,
            "num_failures": self.num_failures,
            "attempt": self.attempt,
            "checkpoint": self.checkpoint_path(self.store.latest["name"]) if self.store.latest else None,
            "checkpoints": [{**c, "path": self.checkpoint_path(c["name"])} for c in self.store.records()],
            "checkpoint_config": self.spec.get("checkpoint_config"),
            "started": self.started,
            "ended": self.ended,
            "num_reports": self.reports,
        }

    @property
    def finishing(self) -> bool:
        return self.state in ("CANCELLING", "FAILING")
