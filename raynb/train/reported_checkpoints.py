"""``ray.train.get_all_reported_checkpoints()`` on raynb's ranks, with Ray 2.60's
``ReportedCheckpoint`` and ``ReportedCheckpointStatus``.

A checkpoint is committed by the head once every rank has made the report that carries it
(``head/store.py``), merged into ``<run>/checkpoint_000NNN`` with rank 0's metrics of that
report, and listed in ``<run>/run.json``. A rank asking for the list first meets the other
ranks (the run's process group, as Ray's report is a barrier), so every rank has made the
same reports; it then waits until the head has committed those reports' checkpoints and
written them into ``run.json``, reads the list, and meets the others again, so all ranks
return the same list.
"""

from __future__ import annotations

import enum
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..cluster.worker import task_context
from . import session as _session
from .checkpoint import Checkpoint
from .report_options import CheckpointConsistencyMode

POLL_S = 0.005  # between looks at the run directory while the head commits
# A run.json that does not read as a record this long is not one being replaced: an error.
CORRUPT_GRACE_S = 1.0
_CORRUPT = object()


class ReportedCheckpointStatus(enum.Enum):
    """Where a reported checkpoint stands (Ray's): ``COMMITTED`` (saved, no validation
    asked), ``PENDING_VALIDATION``, ``VALIDATED``, ``VALIDATION_TIMEOUT``,
    ``VALIDATION_FAILED``. raynb runs no validation tasks, so its checkpoints are COMMITTED."""

    COMMITTED = "COMMITTED"
    PENDING_VALIDATION = "PENDING_VALIDATION"
    VALIDATED = "VALIDATED"
    VALIDATION_TIMEOUT = "VALIDATION_TIMEOUT"
    VALIDATION_FAILED = "VALIDATION_FAILED"


@dataclass
class ReportedCheckpoint:
    """A reported checkpoint with its metrics (rank 0's metrics of that report).

    Attributes:
        checkpoint (Checkpoint): the committed checkpoint (``<run>/checkpoint_000NNN``).
        metrics (dict): the metrics reported with it.
        status (ReportedCheckpointStatus): COMMITTED on raynb.
    """

    checkpoint: Checkpoint
    metrics: dict
    status: ReportedCheckpointStatus


def get_all_reported_checkpoints(
    consistency_mode: CheckpointConsistencyMode = CheckpointConsistencyMode.VALIDATED,
    timeout_s: float | None = None,
) -> list:
    """Every checkpoint of the run kept so far, oldest first (Ray's order of reports), each
    with its metrics; every rank gets the same list. Call it on every rank, the same number
    of times (it meets the other ranks, as ``report`` does in Ray).

    Args:
        consistency_mode (CheckpointConsistencyMode): COMMITTED or VALIDATED; the same on
            raynb, which runs no validation tasks (every checkpoint returned is committed).
        timeout_s (float | None): seconds to wait for the head to commit; None: no limit.

    Returns:
        list[ReportedCheckpoint]: those ``CheckpointConfig(num_to_keep=...)`` kept,
        including those of earlier attempts of the run (a restart or a resume).

    Raises:
        TypeError: ``consistency_mode`` is not a CheckpointConsistencyMode.
        ValueError: ``timeout_s`` is not None and not > 0.
        TimeoutError: the head had not committed them within ``timeout_s``.
        NotImplementedError: this node does not mount the run's storage (its checkpoints
            stream to the head).
        RuntimeError: called outside a training function.
    """
    task = _session._require("get_all_reported_checkpoints")
    _check_args(consistency_mode, timeout_s)
    if task.get("stream_checkpoints"):
        raise NotImplementedError(
            "get_all_reported_checkpoints(): this node does not mount the run's storage (its "
            "checkpoints stream to the head), so its ranks cannot read the run's checkpoint list. "
            "Start the node with --shared-storage on a mount of the head's storage_path, or read "
            "Result.best_checkpoints after fit()"
        )
    _meet(task)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    entries = _committed(Path(task["path"]), task.get("attempt", 0), deadline)
    _meet(task)  # no rank reports again before every rank has read the same list
    run_id = task.get("run_id")
    return [
        ReportedCheckpoint(
            Checkpoint._of_run(str(Path(task["path"]) / c["name"]), run_id),
            dict(c.get("metrics") or {}),
            ReportedCheckpointStatus.COMMITTED,
        )
        for c in entries
    ]


def _check_args(consistency_mode, timeout_s) -> None:
    if not isinstance(consistency_mode, CheckpointConsistencyMode):
        raise TypeError(
            "get_all_reported_checkpoints(consistency_mode=...) takes "
            f"raynb.train.CheckpointConsistencyMode.COMMITTED or .VALIDATED, got {consistency_mode!r:.80}"
        )
    if timeout_s is not None and not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ValueError(
            f"get_all_reported_checkpoints(timeout_s={timeout_s!r}): give seconds > 0, "
            "or None to wait without limit"
        )


def _meet(task: dict) -> None:
    """Wait for every rank of the run here (its torch.distributed group, where it has one)."""
    if task["world_size"] <= 1:
        return
    try:
        import torch.distributed as dist
    except ImportError:
        return
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _committed(run_dir: Path, attempt: int, deadline: float | None) -> list:
    """``run.json``'s checkpoints once no report of this attempt waits to be committed and
    every checkpoint directory is listed there (the head writes it right after each commit)."""
    corrupt_since = None
    while True:
        entries = _listed(run_dir)
        if entries is _CORRUPT:
            corrupt_since = corrupt_since or time.monotonic()
            if time.monotonic() - corrupt_since > CORRUPT_GRACE_S:
                raise ValueError(
                    f"get_all_reported_checkpoints(): {run_dir / 'run.json'} is not a run record "
                    "(not JSON, or its checkpoints are not a list of {name, index}); the head "
                    "writes that file: do not write it from the training function"
                )
            entries = None
        else:
            corrupt_since = None
        if entries is not None and not _staged(run_dir, attempt):
            names = {c["name"] for c in entries}
            on_disk = {p.name for p in run_dir.glob("checkpoint_[0-9][0-9][0-9][0-9][0-9][0-9]")}
            if on_disk <= names:
                return sorted((c for c in entries if c["name"] in on_disk), key=lambda c: c["index"])
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(
                f"get_all_reported_checkpoints(): the head had not committed this run's reported "
                f"checkpoints into {run_dir} in time; give a longer timeout_s (or None)"
            )
        if task_context.current() is None:
            raise RuntimeError("get_all_reported_checkpoints(): the run ended while waiting")
        time.sleep(POLL_S)


def _listed(run_dir: Path):
    """``run.json``'s checkpoint entries; None when not written yet, ``_CORRUPT`` when
    it does not read as a run record (the head replaces it whole, so that lasts)."""
    try:
        with open(run_dir / "run.json") as f:
            record = json.load(f)
    except OSError:
        return None
    except ValueError:
        return _CORRUPT
    entries = record.get("checkpoints") if isinstance(record, dict) else None
    if not isinstance(entries or [], list):
        return _CORRUPT
    entries = list(entries or [])
    ok = all(
        isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("index"), int)
        for c in entries
    )
    return entries if ok and isinstance(record, dict) else _CORRUPT


def _staged(run_dir: Path, attempt: int) -> bool:
    """Whether a checkpoint of this attempt is staged but not yet committed."""
    try:
        names = os.listdir(run_dir / ".staging")
    except OSError:
        return False
    return any(n.startswith(f"{attempt}_") for n in names)
