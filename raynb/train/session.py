"""The per-worker training session: what ``report`` and ``get_context`` see.

The worker starts a session before calling the user's function and ends it
after; outside a session these functions raise a clear error instead of
silently doing nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path

from ..cluster.storage import checkpoint_stream as ckpt_transfer
from ..cluster.worker import task_context
from . import profiling
from .checkpoint import Checkpoint
from .report_metrics import plain_metrics
from .report_options import take_ray_keywords

# A report this long (s) after the rank's previous one is waited on until it is on the
# socket (``report``): slower reports carry an epoch's worth of work, faster ones are steps.
DURABLE_REPORT_GAP_S = 0.01


class TrainContext:
    """Where this worker sits in the run (as ``ray.train.get_context()``)."""

    def __init__(self, task: dict):
        self._task = task

    def get_world_rank(self) -> int:
        """Rank of this worker among all workers of the run, 0..world_size-1."""
        return self._task["rank"]

    def get_local_rank(self) -> int:
        """Rank of this worker among the run's workers on the same node."""
        return self._task["local_rank"]

    def get_world_size(self) -> int:
        """Number of workers in the run."""
        return self._task["world_size"]

    def get_local_world_size(self) -> int:
        """Number of the run's workers on this node."""
        return self._task["local_world_size"]

    def get_node_rank(self) -> int:
        """Index of this worker's node among the run's nodes."""
        return self._task["node_rank"]

    def get_experiment_name(self) -> str:
        """The run's name (its directory under ``storage_path``)."""
        return self._task["name"]

    def get_storage_path(self) -> str:
        """The run directory (str path on the head's file system)."""
        return self._task["path"]

    def get_trial_name(self) -> str:
        """The run's name, as Ray Train's (a Tune trial's: ``<trainable>_<trial_id>``)."""
        return self._task["name"]

    def get_trial_id(self) -> str:
        """The Tune trial's id (``<experiment>_<index>``, as in ``Result.metrics["trial_id"]``);
        in a run outside Tune, the last part of the run's name (its unique suffix)."""
        name = self._task["name"]
        if re.search(r"_[0-9a-f]+_\d{5}$", name):
            return "_".join(name.rsplit("_", 2)[-2:])
        return name.rsplit("_", 1)[-1]

    def get_trial_dir(self) -> str:
        """The run directory, as Ray Train's trial directory (``get_storage_path()``)."""
        return self._task["path"]

    def get_metadata(self) -> dict:
        """The trainer's ``metadata=`` dict ({} when none was given). Ray 2.60's default
        (Train v2) refuses ``metadata=`` and raises here; raynb serves Ray's earlier meaning."""
        from .trainer_metadata import current_metadata

        return current_metadata()

    def get_storage(self):
        """The run's storage paths (``storage_context.StorageContext``; Ray's developer API)."""
        from .storage_context import storage_of

        return storage_of(self._task)

    def get_trial_resources(self):
        """The trial's resources as a ``PlacementGroupFactory`` (Ray Tune's): one bundle per
        rank of this run, each one CPU (a raynb worker is one process on one CPU slot) and,
        where this worker was given CUDA devices, their count as ``GPU``."""
        from .resources import PlacementGroupFactory

        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        gpus = len([d for d in visible.split(",") if d.strip()])
        return PlacementGroupFactory([{"CPU": 1, "GPU": gpus}] * self.get_world_size())

    def __repr__(self) -> str:
        return (
            f"TrainContext(world_rank={self.get_world_rank()}, local_rank={self.get_local_rank()}, "
            f"world_size={self.get_world_size()}, node_rank={self.get_node_rank()})"
        )


def _stage_checkpoint(task: dict, checkpoint: Checkpoint, report_index: int) -> str:
    """Copy the checkpoint's files where the head will commit them from.

    ``<run>/.staging/<attempt>_<report>/rank_<r>``: copied under a temporary name
    and renamed when complete, so a rank killed mid-copy leaves no staged
    directory the head could mistake for a whole one.
    """
    src = Path(checkpoint.path)
    if not src.is_dir():
        raise FileNotFoundError(
            f"report(checkpoint={checkpoint!r}): the directory is gone; "
            "report it before deleting it (e.g. inside the TemporaryDirectory block)"
        )
    run_dir = Path(task["path"])
    if not run_dir.is_dir():  # removed while the run ran: not made again, with the umask's mode
        raise FileNotFoundError(
            f"report(checkpoint=...): the run directory {run_dir} is gone (removed "
            "while the run ran?), so the checkpoint cannot be saved"
        )
    stage = run_dir / ".staging" / f"{task.get('attempt', 0)}_{report_index}"
    final = stage / f"rank_{task['rank']}"
    tmp = stage / f".tmp_rank_{task['rank']}_{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    _make_stage(task, stage)
    try:
        shutil.copytree(src, tmp)
    except (shutil.Error, OSError) as e:
        shutil.rmtree(tmp, ignore_errors=True)  # no half copy left behind
        raise _copy_error(checkpoint, src, e) from None
    if final.exists():  # the same report staged twice (a retried copy): the newer wins
        shutil.rmtree(final)
    os.replace(tmp, final)
    return str(final)


def _make_stage(task: dict, stage: Path) -> None:
    """Make the run's private ``.staging/<attempt>_<report>`` directory.

    Raises:
        OSError: the node cannot write the run directory (naming the node and the fix).
    """
    try:
        stage.parent.mkdir(exist_ok=True, mode=0o700)  # private, as the run directory (pickled state)
        stage.mkdir(exist_ok=True, mode=0o700)
    except OSError as e:
        node = task.get("node_id") or "local"
        # The head's own node: its storage is full or read-only. Another: it said it mounts the
        # head's storage (--shared-storage) but cannot write it.
        fix = (
            "Free space there, or give a storage_path that can be written"
            if node == "local"
            else "Mount the head's storage_path there at the same path, or start that node without "
            "--shared-storage (its checkpoints then stream to the head)"
        )
        raise OSError(
            f"report(checkpoint=...): node {node} ({socket.gethostname()}) cannot write the run "
            f"directory {task['path']}: {e.strerror or e}. {fix}"
        ) from None


def _copy_error(checkpoint: Checkpoint, src: Path, e: OSError) -> OSError:
    """The error for a checkpoint copy that failed: its first bad file and the likely fix."""
    # shutil.Error is a list of (src, dst, why) tuples, one per bad file: for a symlink
    # loop, ~40 levels of them (16 kB), naming raynb's staging paths. Say it in one line.
    bad = e.args[0] if isinstance(e, shutil.Error) and e.args and isinstance(e.args[0], list) else None
    first = f"{bad[0][0]}: {bad[0][2]}" if bad else str(e)
    more = f" (and {len(bad) - 1} more)" if bad and len(bad) > 1 else ""
    full = "No space left" in first or "Disk quota" in first or "Read-only" in first
    hint = (
        "The run directory's file system is full or read-only: free space, or give a "
        "storage_path that can hold the checkpoints."
        if full
        else "A dangling symlink or a symlink loop in the checkpoint directory? Symlinks are "
        "followed (their targets are copied)."
    )
    return OSError(
        f"report(checkpoint={checkpoint!r}): could not copy checkpoint {src} into the "
        f"run directory: {first}{more}. {hint}"
    )


def _stream_checkpoint(task: dict, checkpoint: Checkpoint, report_index: int) -> str:
    """Stream the checkpoint's files to the head (this node does not mount the run's
    storage): returns the directory the head staged them in (``ckpt_transfer.upload``)."""
    src = Path(checkpoint.path)
    if not src.is_dir():
        raise FileNotFoundError(
            f"report(checkpoint={checkpoint!r}): the directory is gone; "
            "report it before deleting it (e.g. inside the TemporaryDirectory block)"
        )
    try:
        return ckpt_transfer.upload(task, str(src), report_index)
    except OSError as e:
        raise OSError(
            f"report(checkpoint=...): rank {task['rank']} on node {task.get('node_id')} could "
            f"not stream checkpoint {src} to the head: {e}"
        ) from None


def in_session() -> bool:
    return task_context.current() is not None


def checkpoint_requested() -> bool:
    """Whether the driver asked this trial for a checkpoint (a Tune ``Callback`` set Ray's
    ``SHOULD_CHECKPOINT`` in ``on_trial_result``) since this was last asked; a class
    ``Trainable`` then checkpoints after its next step. False outside a run."""
    return task_context.checkpoint_requested()


def _require(what: str) -> dict:
    task = task_context.current()
    if task is None:
        raise RuntimeError(
            f"{what}() was called outside a training function. Call it inside "
            "train_loop_per_worker (TorchTrainer) or a %%ray_train cell, which run on the workers."
        )
    return task


def _durable(state: dict, now: float, checkpoint) -> bool:
    """Whether this report is waited on until it is on the socket (``report``)."""
    last, state["last_report"] = state.get("last_report", 0.0), now
    return checkpoint is not None or now - last >= DURABLE_REPORT_GAP_S


def report(metrics: dict | None = None, checkpoint=None, **more_metrics) -> None:
    """Report metrics for this step/epoch (``ray.train.report``).

    Args:
        metrics: dict of str -> number (tensors of one element and numpy scalars
            are converted); Ray's older ``report(loss=..., acc=...)`` form, keyword
            arguments, is taken too (merged into ``metrics``). Rank 0's reports become
            ``Result.metrics`` and the
            rows of ``result.json`` / ``progress.csv``; every rank's ``epoch`` or
            ``step`` drives its progress bar.
        checkpoint (Checkpoint | None): a directory of state to persist with this
            report. Its files are copied (before ``report`` returns) into the run
            directory as ``checkpoint_000NNN/``, committed once every rank made this
            report; when several ranks pass one, their files are merged (rank 0's win
            on a name clash), which is how sharded state is saved.

    Call it on every rank, the same number of times (as in Ray Train): a
    checkpoint is committed when all ranks reached the report that carries it.
    The report is queued to the worker's I/O thread. One with a checkpoint, or one
    ``DURABLE_REPORT_GAP_S`` (0.01 s) or more after this rank's previous report, returns
    once it is handed to the socket (tens of microseconds), so that a rank killed soon
    after (an epoch's report, then a preemption) does not take it along; per-step
    reports and those in a task's first 0.02 s (``head_link.HANDOVER_S``) are not waited
    on. A rank killed within a millisecond of its report may still lose it: the run
    then resumes from the checkpoint before (at least once).

    Raises:
        TypeError: ``metrics`` is not a dict, or ``checkpoint`` is not a Checkpoint.
        ValueError: (``report_metrics.ReportTooLarge``) the metrics would take over
            ``MAX_REPORT_BYTES`` (1 MiB; ``$RAYNB_MAX_REPORT_BYTES``): nothing was sent.
        RuntimeError: called outside a training function.
    """
    task = _require("report")
    take_ray_keywords(more_metrics, checkpoint is not None)  # Ray 2.60's upload_mode=...: not metrics
    if more_metrics or metrics is None:  # Ray's older tune.report(loss=..., acc=...)
        metrics = {**(metrics if isinstance(metrics, dict) else {}), **more_metrics}
    if not isinstance(metrics, dict):
        raise TypeError(f"report() takes a dict of metrics, got {type(metrics).__name__}: {metrics!r:.80}")
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        raise TypeError(
            f"report(checkpoint=...) takes a raynb.train.Checkpoint, got {type(checkpoint).__name__}: "
            f"{checkpoint!r:.80}; save the state into a directory and pass "
            "Checkpoint.from_directory(that_directory)"
        )
    plain = plain_metrics(metrics)  # ValueError, before this report counts (its index)
    if task.get("elastic"):  # an elastic run's world size changes between attempts: a column
        plain.setdefault("world_size", task["world_size"])
    state = task_context.state()
    index = state["reports"] = state.get("reports", 0) + 1  # this rank's reports in this attempt
    now = time.time()
    durable = _durable(state, now, checkpoint)
    event = {"kind": "report", "metrics": plain, "time": now, "index": index}
    if checkpoint is not None:
        event["checkpoint"] = (
            _stream_checkpoint(task, checkpoint, index)
            if task.get("stream_checkpoints")
            else _stage_checkpoint(task, checkpoint, index)
        )
    _send_report(task, event, durable, index)
    profiling.step_on_report()  # one report, one step of a RunConfig(profile=...) window


def _send_report(task: dict, event: dict, durable: bool, index: int) -> None:
    """Send the report event. An elastic run about to grow holds here until the head has
    every rank's report of this index, and stops here (``StopAttempt``) at one that
    committed a checkpoint (head/elastic.py)."""
    gated = bool(task.get("elastic")) and task_context.gated()
    if gated:
        event["gated"] = True
    task_context.emit(event, wait=durable or gated)
    if gated and task_context.await_verdict(index):
        raise task_context.StopAttempt(f"the run grows: stopped at report {index}, its checkpoint saved")


def get_context() -> TrainContext:
    """This worker's :class:`TrainContext` (ranks, world size, node rank)."""
    return TrainContext(_require("get_context"))


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint to resume from (``ray.train.get_checkpoint``).

    Returns:
        After a restart (``FailureConfig``) or a resume (``TorchTrainer.restore``,
        ``%%ray_train --resume``): the run's latest committed checkpoint. Otherwise
        the ``resume_from_checkpoint`` given to the trainer, or None.
    """
    task = _require("get_checkpoint")
    path = task.get("checkpoint")
    if path and "://" in path:  # resume_from_checkpoint at a storage URI: read as it is
        return Checkpoint(path)
    if path and task.get("stream_checkpoints"):
        # This node does not mount the run's storage: fetch the files from the head, once
        # per task, into the worker's private temp dir (removed when the worker exits).
        state = task_context.state()
        if state.get("restored") is None:
            dest = tempfile.mkdtemp(prefix="restored-")
            task_context.at_end(lambda status: shutil.rmtree(dest, ignore_errors=True))
            state["restored"] = ckpt_transfer.download(task, os.path.join(dest, os.path.basename(path)))
        path = state["restored"]
    return Checkpoint(path) if path else None
