"""Run configuration and results (names and fields follow ``ray.train``)."""

from __future__ import annotations

import json
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .elastic import check_num_workers
from .experiment_callback import check_callbacks
from .logs import RunLogs
from .profiling import profile_options


@dataclass
class ScalingConfig:
    """How many workers a run gets and what each holds.

    Args:
        num_workers (int | tuple[int, int]): ranks in the run (the world size), >= 1; or
            ``(min_workers, max_workers)`` for an elastic run (Ray Train v2): it starts with
            any count from min to max the cluster can place, restarts on what remains after
            a lost rank, and grows when room appears (docs/elastic.md).
        elastic_resize_monitor_interval_s (float): seconds between an elastic run's checks
            for room to grow (Ray's default, 60); unused with a fixed ``num_workers``.
        use_gpu (bool): one CUDA device per worker and the NCCL backend (gloo otherwise).
        resources_per_worker (dict[str, float] | None): e.g. ``{"CPU": 1, "GPU": 1}``;
            checked as Ray checks it (a ``"GPU"`` amount needs ``use_gpu=True``) and
            recorded with the run: the warm pool runs one worker per rank, with one CUDA
            device each when ``use_gpu``, whatever the amounts.
        timeout_s (float | None): torch.distributed collective timeout in seconds
            (torch's default, 1800 s, when None).
        placement_strategy ("PACK" | "SPREAD"): as Ray's placement groups: PACK puts the
            ranks on as few nodes as possible, SPREAD over as many as possible. Either way
            a node's ranks are contiguous, so local ranks count 0..k-1 on every node.

    Raises:
        ValueError: ``num_workers`` not an integer >= 1 nor a ``(min, max)`` pair of them
            with min <= max, a negative ``elastic_resize_monitor_interval_s``, an unknown
            ``placement_strategy``,
            ``timeout_s`` not a positive number, a negative amount in ``resources_per_worker``,
            GPUs there that contradict ``use_gpu``.
        TypeError: ``use_gpu`` not a bool, ``resources_per_worker`` not a dict of amounts.
    """

    num_workers: int | tuple = 4
    use_gpu: bool = False
    resources_per_worker: dict | None = None
    timeout_s: float | None = None
    placement_strategy: str = "PACK"
    elastic_resize_monitor_interval_s: float = 60.0

    def __post_init__(self):
        self.num_workers = check_num_workers(self.num_workers)
        t = self.elastic_resize_monitor_interval_s
        if not isinstance(t, numbers.Real) or isinstance(t, bool) or not t >= 0:
            raise ValueError(
                f"ScalingConfig(elastic_resize_monitor_interval_s={t!r}) must be a number of seconds >= 0"
            )
        if self.placement_strategy not in ("PACK", "SPREAD"):
            raise ValueError(
                f"ScalingConfig(placement_strategy={self.placement_strategy!r}): use "
                "'PACK' (fewest nodes) or 'SPREAD' (most nodes)"
            )
        if self.use_gpu not in (True, False):  # (numpy's bools too; "yes" or 2 is a mistake)
            raise TypeError(f"ScalingConfig(use_gpu={self.use_gpu!r}): use_gpu must be True or False")
        self.use_gpu = bool(self.use_gpu)
        t = self.timeout_s
        if t is not None and (not isinstance(t, numbers.Real) or isinstance(t, bool) or not t > 0):
            raise ValueError(f"ScalingConfig(timeout_s={t!r}) must be a positive number of seconds")
        self._check_resources()

    @property
    def elasticity_enabled(self) -> bool:
        """True for ``num_workers=(min, max)`` (Ray Train v2's name)."""
        return isinstance(self.num_workers, tuple)

    @property
    def min_workers(self) -> int:
        return self.num_workers[0] if self.elasticity_enabled else self.num_workers

    @property
    def max_workers(self) -> int:
        return self.num_workers[1] if self.elasticity_enabled else self.num_workers

    @property
    def cpus_per_worker(self) -> int | None:
        """The torch threads each rank gets: ``resources_per_worker["CPU"]`` (Ray reserves
        that many CPUs for each worker and sets its ``OMP_NUM_THREADS`` to them), rounded
        down, at least 1; None when it asks for none (each rank then gets its share of its
        node's cores)."""
        cpus = (self.resources_per_worker or {}).get("CPU")
        return max(1, int(cpus)) if cpus else None

    @property
    def cpus_requested(self) -> float | None:
        """``resources_per_worker["CPU"]`` as given (fractions kept: Ray packs trials of
        ``{"cpu": 0.5}`` two to a CPU); None when it asks for none."""
        cpus = (self.resources_per_worker or {}).get("CPU")
        return float(cpus) if cpus else None

    def _check_resources(self) -> None:
        """``resources_per_worker`` as Ray's ScalingConfig checks it: names to amounts >= 0,
        and a GPU asked for there only with ``use_gpu=True`` (and not 0 with it)."""
        res = self.resources_per_worker
        if res is None:
            return
        if not isinstance(res, dict) or not all(
            isinstance(k, str) and isinstance(v, numbers.Real) and not isinstance(v, bool)
            for k, v in res.items()
        ):
            raise TypeError(
                f"ScalingConfig(resources_per_worker={res!r}): give a dict of resource names "
                "to amounts >= 0, e.g. {'CPU': 1, 'GPU': 1}"
            )
        negative = sorted(k for k, v in res.items() if not v >= 0)  # (NaN too)
        if negative:  # the right type, a wrong value: a ValueError, as Ray's
            raise ValueError(
                f"ScalingConfig(resources_per_worker={res!r}): {', '.join(map(repr, negative))} "
                "must be an amount >= 0"
            )
        gpus = res.get("GPU", 0)
        if gpus and not self.use_gpu:
            raise ValueError(
                f"ScalingConfig(resources_per_worker={res!r}) asks for GPUs but use_gpu is "
                "False: set use_gpu=True, or remove 'GPU' from resources_per_worker"
            )
        if self.use_gpu and "GPU" in res and not gpus:
            raise ValueError(
                f"ScalingConfig(use_gpu=True) but resources_per_worker={res!r} gives each "
                "worker 0 GPUs: set use_gpu=False, or give 'GPU' a positive amount"
            )


@dataclass
class CheckpointConfig:
    """Which of a run's checkpoints to keep (``ray.train.CheckpointConfig``).

    Args:
        num_to_keep (int | None): keep at most this many, None keeps all. The latest
            checkpoint is always kept (a restart resumes from it).
        checkpoint_score_attribute (str | None): metric that ranks checkpoints for
            pruning and ``Result.best_checkpoints``; None ranks by age (newest best).
        checkpoint_score_order ("max" | "min"): whether a higher or lower score is better.
        checkpoint_frequency (int): Ray Tune's, for a class ``Trainable``: checkpoint every
            this many steps (0: none). A function checkpoints when it reports one.
        checkpoint_at_end (bool | None): Ray Tune's, for a class ``Trainable``: checkpoint
            its last step.
    """

    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: bool | None = None

    def __post_init__(self):
        f = self.checkpoint_frequency
        if not isinstance(f, int) or isinstance(f, bool) or f < 0:
            raise ValueError(f"CheckpointConfig(checkpoint_frequency={f!r}): give an integer >= 0")
        n = self.num_to_keep
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(
                f"CheckpointConfig(num_to_keep={n!r}): give an integer >= 1, or None to keep all"
            )
        if self.checkpoint_score_order not in ("max", "min"):
            raise ValueError(
                f"CheckpointConfig(checkpoint_score_order={self.checkpoint_score_order!r}): "
                "use 'max' or 'min'"
            )


@dataclass
class FailureConfig:
    """How often a run is restarted after a failure (``ray.train.FailureConfig``).

    Args:
        max_failures (int): restarts allowed; 0 ends the run at the first failure,
            -1 restarts without limit. A failure is a rank dying (a signal, ``os._exit``,
            the OOM killer, its node lost) or raising; every rank is stopped and the run
            starts again on warm workers from its latest checkpoint.
        fail_fast (bool | "raise"): for a Tuner, the first trial in ERROR stops the
            experiment (running trials stopped, none started); ``"raise"`` also raises its
            error from ``fit()``. Needs ``max_failures=0``, as in Ray.

    Raises:
        ValueError: a bad ``max_failures``; ``fail_fast`` not a bool or "raise", or
            given with ``max_failures`` other than 0.
    """

    max_failures: int = 0
    fail_fast: bool | str = False

    def __post_init__(self):
        if self.fail_fast not in (True, False, "raise"):
            raise ValueError(f"FailureConfig(fail_fast={self.fail_fast!r}): use True, False or 'raise'")
        if self.fail_fast and self.max_failures != 0:
            raise ValueError(
                f"FailureConfig(fail_fast={self.fail_fast!r}) needs max_failures=0 (as in Ray): "
                f"a trial is restarted max_failures={self.max_failures!r} times before it fails"
            )
        n = self.max_failures
        if not isinstance(n, int) or isinstance(n, bool) or n < -1:
            raise ValueError(f"FailureConfig(max_failures={n!r}): give an integer >= 0, or -1 for unlimited")


@dataclass
class RunConfig:
    """Where and under what name a run's results go.

    Args:
        name (str | None): the run directory's name; ``TorchTrainer_<date>_<time>_<id>`` when None.
        storage_path (str | None): the parent directory (on the head's file system);
            ``$RAYNB_STORAGE_PATH`` or ``~/raynb_results`` when None.
        verbose (int): 0 shows no progress pane or text, 1 (default) shows it.
        checkpoint_config (CheckpointConfig | None): which checkpoints to keep (all by default).
        failure_config (FailureConfig | None): restarts after failures (none by default).
        callbacks (list[raynb.tune.Callback] | None): called in the notebook process as the
            run (or each trial of a Tuner) goes: ``raynb.tune.logger.TBXLoggerCallback()``,
            ``raynb.integrations.MLflowLoggerCallback()``, your own ``raynb.tune.Callback``.
        profile (bool | dict | None): ``torch.profiler`` on every rank for a window of
            ``report()`` steps: True for wait=1, warmup=1, active=3, or a dict of ``wait``,
            ``warmup``, ``active``, ``record_shapes``, ``profile_memory``, ``with_stack``,
            ``top``. Chrome traces go to ``<run dir>/profile/rank_<r>.json``; the notebook
            shows the top operators per rank, and ``Result.profile`` keeps them.
        stop (dict | callable | raynb.tune.stopper.Stopper | None): when a Tune trial (or a
            TorchTrainer run) stops: ``{"training_iteration": 10}`` stops it once a report's
            value reaches the bound; ``f(trial_id, result) -> bool``; or a Stopper
            (``raynb.tune.stopper``), whose ``stop_all()`` ends the whole experiment.
        progress_reporter (CLIReporter | JupyterNotebookReporter | None): accepted as in
            Ray; raynb shows its own trial table (a line says so once).
        logging_config (LoggingConfig | None): Ray's level for its controller's logs; accepted
            with no effect here (raynb has no such logs).
        sync_config, log_to_file, storage_filesystem: Ray's; accepted with no effect here
            (the run directory is on the head's file system; rank output is kept per rank).

    Raises:
        TypeError: a config of the wrong class; an item of ``callbacks`` that is not a
            ``raynb.tune.Callback`` (named by its type); a ``profile`` that is not a bool or dict.
        ValueError: a ``name`` that is not a plain directory name; an unknown ``profile`` key
            or a bad count in it.
    """

    name: str | None = None
    storage_path: str | None = None
    verbose: int = 1
    checkpoint_config: CheckpointConfig | None = None
    failure_config: FailureConfig | None = None
    callbacks: list | None = None
    profile: bool | dict | None = None
    stop: Any = None
    progress_reporter: Any = None
    sync_config: Any = None
    log_to_file: Any = False
    storage_filesystem: Any = None
    logging_config: Any = None

    def __post_init__(self):
        check_callbacks(self.callbacks)
        _check_logging_config(self.logging_config)
        if self.stop is not None and not isinstance(self.stop, dict) and not callable(self.stop):
            raise TypeError(
                f"RunConfig(stop=...) takes a dict of result bounds, a function f(trial_id, "
                f"result) -> bool or a raynb.tune.stopper.Stopper, got {type(self.stop).__name__}"
            )
        _ray_only_fields(self)
        profile_options(self.profile)
        if self.checkpoint_config is not None and not isinstance(self.checkpoint_config, CheckpointConfig):
            raise TypeError(
                f"RunConfig(checkpoint_config=...) takes a CheckpointConfig, got "
                f"{type(self.checkpoint_config).__name__}"
            )
        if self.failure_config is not None and not isinstance(self.failure_config, FailureConfig):
            raise TypeError(
                f"RunConfig(failure_config=...) takes a FailureConfig, got "
                f"{type(self.failure_config).__name__}"
            )
        if self.name is not None and (not self.name or "/" in self.name or self.name in (".", "..")):
            raise ValueError(f"RunConfig(name={self.name!r}): the name must be a plain directory name")


def _check_logging_config(lc) -> None:
    """``RunConfig(logging_config=...)``: a ``LoggingConfig``, or None (Ray 2.60's field)."""
    from .backend_config import LoggingConfig

    if lc is None:
        return
    if not isinstance(lc, LoggingConfig):
        raise TypeError(
            f"RunConfig(logging_config=...) takes a raynb.train.LoggingConfig, got {type(lc).__name__}"
        )
    from ..client.no_effect import accepted_no_effect

    accepted_no_effect(
        "RunConfig(logging_config=...)",
        "it sets the level of Ray Train's controller logs; raynb's run pane and Result.logs "
        "show the ranks' output",
    )


def _ray_only_fields(rc: "RunConfig") -> None:
    """RunConfig's Ray fields that have no effect here: one line each, once."""
    from ..client.no_effect import accepted_no_effect

    if rc.progress_reporter is not None:
        accepted_no_effect(
            "RunConfig(progress_reporter=...)",
            "raynb draws its own trial table (RunConfig(verbose=0) hides it)",
        )
    if rc.sync_config is not None:
        accepted_no_effect(
            "RunConfig(sync_config=...)",
            "run directories are written on the head's file system directly; there is nothing to sync",
        )
    if rc.log_to_file:
        accepted_no_effect(
            "RunConfig(log_to_file=...)",
            "every rank's output is kept in the run directory anyway (Result.logs)",
        )
    if rc.storage_filesystem is not None:
        raise ValueError(
            "RunConfig(storage_filesystem=...) is not served by raynb: give storage_path a local "
            "path or an object store URI (s3://..., gs://...) instead"
        )
    if rc.verbose is None:  # Ray's default
        rc.verbose = 1
    elif type(rc.verbose) is not int:
        rc.verbose = int(rc.verbose)  # Ray's Verbosity / AirVerbosity enums


# Result(metrics_dataframe=FROM_REPORTS): the frame is built from ``_reports`` on first use.
class _FromReports:
    def __reduce__(self):
        return "FROM_REPORTS"  # a pickled Result still builds its frame when read


FROM_REPORTS = _FromReports()


class _ReportsFrame:
    """``Result.metrics_dataframe``: a pandas DataFrame of the rank-0 reports, built when
    first read (building one on every fit was a large part of a warm re-run, mostly unread)."""

    def __set_name__(self, owner, name):
        self._slot = "_" + name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return None  # the dataclass field's default
        value = obj.__dict__.get(self._slot)
        if value is FROM_REPORTS:
            import pandas as pd

            value = obj.__dict__[self._slot] = pd.DataFrame(obj._reports)
        return value

    def __set__(self, obj, value):
        obj.__dict__[self._slot] = value


@dataclass
class Result:
    """The outcome of ``fit()`` (``ray.train.Result``).

    Attributes:
        metrics (dict | None): rank 0's last report, with Ray's automatic fields
            (``training_iteration``, ``time_total_s``, ...).
        metrics_dataframe (pandas.DataFrame | None): every rank-0 report, one row each.
        error (Exception | None): the run's error (a ``RunError``), if it failed.
        path (str | None): the run directory.
        checkpoint (Checkpoint | None): the latest committed checkpoint.
        best_checkpoints (list[tuple[Checkpoint, dict]]): the kept checkpoints with
            the metrics reported with each; best first when
            ``CheckpointConfig.checkpoint_score_attribute`` is set, else oldest first.
        name (str | None): the run's name.
        state (str | None): ``FINISHED``, ``FAILED``, ``CANCELLED``, ``STOPPED`` (a Tune
            trial its scheduler stopped early: no error), or ``RUNNING`` /
            ``PENDING`` for a run still going (``raynb.get_run``).
        time_total_s (float | None): seconds from the ranks starting to the run's end.
        failures (list[dict]): the cause of each failed attempt (restarts and the last); past
            100 failures (unlimited restarts) the first 10 and the latest 90.
        logs (RunLogs): the tail of every rank's output, a list of lines tagged
            ``(rank N)`` (``(rank N, stderr)`` for stderr); ``logs(rank=2)`` reads rank 2's
            full output (str) from the run directory, ``logs()`` every rank's.
    """

    metrics: dict | None = None
    metrics_dataframe: Any = _ReportsFrame()
    error: Exception | None = None
    path: str | None = None
    checkpoint: Any = None
    name: str | None = None
    state: str | None = None
    time_total_s: float | None = None
    best_checkpoints: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    logs: RunLogs = field(default_factory=RunLogs, repr=False)
    _reports: list = field(default_factory=list, repr=False)

    def __post_init__(self):
        if not isinstance(self.logs, RunLogs):  # Result(logs=[...]) built by hand
            self.logs = RunLogs(self.logs or [], self.path)
        elif self.logs.path is None:
            self.logs.path = self.path

    def get_best_checkpoint(self, metric: str, mode: str):
        """The kept checkpoint whose reported ``metric`` is best (``mode`` "min" or "max"),
        as Ray's ``Result.get_best_checkpoint``; None when no kept checkpoint reported it.

        Raises:
            ValueError: ``mode`` neither "min" nor "max".
        """
        if mode not in ("min", "max"):
            raise ValueError(f"get_best_checkpoint(mode={mode!r}): use 'min' or 'max'")
        scored = [(m[metric], c) for c, m in self.best_checkpoints if isinstance(m, dict) and metric in m]
        if not scored:
            return None
        pick = min if mode == "min" else max
        return pick(scored, key=lambda vc: vc[0])[1]

    @property
    def filesystem(self):
        """The ``pyarrow.fs.FileSystem`` that reads ``path`` (Ray's ``Result.filesystem``):
        the one of its URI for a ``scheme://`` path, else the local file system."""
        import pyarrow.fs as pafs

        if self.path and "://" in str(self.path):
            return pafs.FileSystem.from_uri(str(self.path))[0]
        return pafs.LocalFileSystem()

    @property
    def config(self) -> dict | None:
        """The run's ``train_loop_config`` as recorded in ``params.json``."""
        try:
            return json.loads((Path(self.path) / "params.json").read_text())
        except (OSError, TypeError, ValueError):
            return None

    @property
    def profile(self):
        """What ``RunConfig(profile=...)`` / ``--profile`` recorded (a ``RunProfile``: per-rank
        top operators, ``traces`` by rank, ``table()``), or None for a run not profiled."""
        from .profile_result import RunProfile

        return RunProfile.from_run_dir(self.path)

    @classmethod
    def from_path(cls, path: str) -> "Result":
        """Read a run directory back, with no cluster running.

        Args:
            path (str): a run directory (``<storage_path>/<run name>``).

        Raises:
            FileNotFoundError: ``path`` is not a directory.
            raynb.rundir.CorruptRunDirectory: ``run.json`` or ``params.json`` is
                missing or unreadable (the message names the file). Nothing is written.
        """
        from ..cluster.storage.rundir import read_run_dir

        return result_from_record(read_run_dir(path))

    def __repr__(self) -> str:
        return (
            f"Result(name={self.name!r}, state={self.state!r}, metrics={self.metrics!r}, "
            f"path={self.path!r}, checkpoint={self.checkpoint!r}, error={self.error!r})"
        )


def _score_key(attr: str | None, order: str):
    def key(item):
        v = item[1].get(attr) if attr else None
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return float("inf")
        return -v if order == "max" else v

    return key


def result_from_record(record: dict, reports: list | None = None) -> Result:
    """A :class:`Result` from a run record (``read_run_dir``, the head's ``run_record``,
    or ``run_done``), with ``reports`` (rank-0 rows) when the record lacks them."""
    from .checkpoint import Checkpoint
    from .train_errors import run_error

    reports = reports if reports is not None else list(record.get("reports") or [])
    ckpts = [c for c in record.get("checkpoints") or [] if c.get("path")]
    run_id = record.get("run_id")  # a head's run: read through the head where not readable here
    best = [(Checkpoint._of_run(c["path"], run_id), c.get("metrics") or {}) for c in ckpts]
    cc = record.get("checkpoint_config") or {}
    if cc.get("checkpoint_score_attribute"):
        best.sort(key=_score_key(cc["checkpoint_score_attribute"], cc.get("checkpoint_score_order", "max")))
    latest = record.get("checkpoint") or (ckpts[-1]["path"] if ckpts else None)
    started, ended = record.get("started"), record.get("ended")
    total = record.get("time_total_s")
    if total is None and started and ended:
        total = ended - started
    result = Result(
        metrics=reports[-1] if reports else (record.get("metrics") or None),
        metrics_dataframe=FROM_REPORTS,
        path=record.get("path"),
        name=record.get("name"),
        state=record.get("state"),
        time_total_s=total,
        checkpoint=Checkpoint._of_run(latest, run_id) if latest else None,
        best_checkpoints=best,
        failures=list(record.get("failures") or []),
        logs=RunLogs(record.get("output") or [], record.get("path"), record.get("world_size")),
        _reports=reports,
    )
    if record.get("state") in ("FAILED", "CANCELLED"):
        result.error = run_error(
            record.get("name", "?"), record.get("errors") or [], result=result, state=record["state"]
        )
    return result
