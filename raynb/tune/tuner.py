"""``Tuner``: hyperparameter search on the warm pool (``ray.tune.Tuner``).

Each trial is one raynb run, ``<experiment_path>/<trainable>_<trial_id>/``, on one warm
worker (a function trainable) or on ``num_workers`` ranks (a TorchTrainer).
"""

from __future__ import annotations

import re
import shutil
import sys
import time
import uuid
from pathlib import Path

import cloudpickle

from ..client import bulk, views
from ..cluster.protocol.run_states import RUN_TERMINAL as TERMINAL
from ..cluster.storage.rundir import make_private_dir, make_run_name, private_opener
from ..train.callback_list import CallbackList
from ..train.config import RunConfig, ScalingConfig
from . import registry
from .controller import TuneController
from .experiment_state import (
    ExperimentState,
    check_same_trainable,
    experiment_dir,
    read_state,
    read_tuner_file,
    trainable_header,
)
from .interrupt import report_interrupt
from .result_grid import ResultGrid
from .search.basic_variant import BasicVariantGenerator
from .search.searcher import Searcher
from .search.variant_generator import validate_space, varying_keys
from .stopper import as_stopper
from .stopping import StoppingScheduler
from .trainable import Trainable, class_trainable
from .trial import ERROR, PAUSED, PENDING, RUNNING, TERMINATED, Trial
from .trial import requeue as _requeue
from .trial_catch_up import catch_up as _catch_up
from .trial_setup import TrialSetup
from .tune_config import TuneConfig


def _trainable_parts(trainable, param_space):
    """(fn, ScalingConfig, base config, nested key, trainer RunConfig, name) of a trainable."""
    from ..client.submit_and_follow import WORKER_KINDS
    from ..train.torch import TorchTrainer

    tune_parts = getattr(type(trainable), "_tune_parts", None)
    if tune_parts is not None and not isinstance(trainable, type):  # XGBoostTrainer: its own merge
        return trainable._tune_parts(param_space)
    if isinstance(trainable, TorchTrainer):
        extra = sorted(set(param_space or {}) - {"train_loop_config"})
        if extra:
            raise ValueError(
                f"param_space for a TorchTrainer takes only 'train_loop_config' (merged into "
                f"the trainer's train_loop_config); got also {extra}"
            )
        from ..train.datasets import with_datasets

        fn = with_datasets(
            trainable.train_loop_per_worker,
            trainable.datasets,
            trainable.dataset_config.unsplit(trainable.datasets),
        )  # one copy per node, all trials
        return (
            fn,
            trainable.scaling_config,
            trainable.train_loop_config,
            "train_loop_config",
            trainable.run_config,
            # TensorflowTrainer's trials run on workers of their kind (submit_run's worker_kind).
            trainable._name_prefix if trainable._name_prefix in WORKER_KINDS else "TorchTrainer",
        )
    if isinstance(trainable, type) and issubclass(trainable, Trainable):  # Tuner.restore's check
        trainable = class_trainable(trainable)
    if callable(trainable) and not isinstance(trainable, type):
        name = re.sub(r"[^A-Za-z0-9_-]+", "", getattr(trainable, "__name__", "") or "") or "trainable"
        scaling = getattr(trainable, "_raynb_scaling", None) or ScalingConfig(num_workers=1)  # with_resources
        return trainable, scaling, None, None, None, name
    raise TypeError(
        f"Tuner takes a function f(config) that calls raynb.tune.report(), or a TorchTrainer; "
        f"got {type(trainable).__name__}"
    )


def _function_of(trainable, run_config):
    """A class ``Trainable`` as a function trainable, with its checkpoint settings (Ray's
    ``checkpoint_frequency`` / ``checkpoint_at_end``, for class trainables only).

    Raises:
        ValueError: those settings given for a function trainable (as Ray)."""
    cc = getattr(run_config, "checkpoint_config", None)
    is_class = isinstance(trainable, type) and issubclass(trainable, Trainable)
    if not is_class:
        if cc is not None and (cc.checkpoint_frequency or cc.checkpoint_at_end):
            raise ValueError(
                "CheckpointConfig(checkpoint_frequency=, checkpoint_at_end=) apply to a class "
                "Trainable; a function checkpoints with report(..., checkpoint=...)"
            )
        return trainable
    stop = getattr(run_config, "stop", None)
    return class_trainable(
        trainable,
        cc.checkpoint_frequency if cc else 0,
        bool(cc and cc.checkpoint_at_end),
        stop if isinstance(stop, dict) else None,
    )


class Tuner:
    """Run trials of ``trainable`` over ``param_space`` (``ray.tune.Tuner``).

    Args:
        trainable: ``f(config)`` calling ``raynb.tune.report(...)`` (one worker per trial), or
            a ``TorchTrainer`` (each trial is a DDP run of ``scaling_config.num_workers``
            ranks; ``param_space={"train_loop_config": {...}}`` is merged into the trainer's
            ``train_loop_config``).
        param_space (dict | None): the search space: constants, ``uniform``/``choice``/...
            domains, ``grid_search``, ``sample_from``, nested dicts.
        tune_config (TuneConfig | None): metric, mode, samples, search, scheduler, limits.
        run_config (RunConfig | None): ``name`` and ``storage_path`` of the experiment
            directory (``<storage_path>/<name>``; default ``~/raynb_results/<trainable>_<time>``),
            ``verbose`` (0: no table), and the checkpoint/failure configs given to every trial.

    Raises (before any trial starts):
        ValueError: a bad search space (naming the key), mode, num_samples; a scheduler or
            search algorithm that needs metric/mode given none; conflicting metric/mode.
        TypeError: a trainable that is neither a function nor a TorchTrainer.
    """

    def __init__(
        self,
        trainable,
        *,
        param_space: dict | None = None,
        tune_config: TuneConfig | None = None,
        run_config: RunConfig | None = None,
        _restored: dict | None = None,
        _tuner_kwargs: dict | None = None,
    ):
        tune_config = tune_config if tune_config is not None else TuneConfig()
        if not isinstance(tune_config, TuneConfig):
            raise TypeError(f"tune_config must be a TuneConfig, got {type(tune_config).__name__}")
        if run_config is not None and not isinstance(run_config, RunConfig):
            raise TypeError(f"run_config must be a RunConfig, got {type(run_config).__name__}")
        validate_space(param_space)
        trainable = _function_of(registry.resolve(trainable), run_config)
        fn, scaling, base, nested, trainer_rc, name = _trainable_parts(trainable, param_space)
        self._trainable = trainable
        self._param_space = param_space
        self._tune_config = tune_config
        self._run_config = _with_tuner_kwargs(run_config or trainer_rc or RunConfig(), _tuner_kwargs)
        # Saved now, before the searcher and scheduler are told metric/mode/space, so a restore
        # starts them afresh and replays the finished trials into them.
        self._settings_blob, self._settings_warning = _pickled_settings(
            param_space, tune_config, self._run_config
        )
        tc = tune_config
        search_alg, scheduler = _search_alg_of(tc), _scheduler_of(tc)
        _set_search_properties(search_alg, scheduler, tc, param_space)
        scheduler.validate()
        self._search_alg = search_alg
        self._scheduler = scheduler
        multi = isinstance(search_alg.metric, (list, tuple))  # multi-objective: no one best
        self._metric = tc.metric or (None if multi else search_alg.metric) or scheduler.metric
        self._mode = tc.mode or (None if multi else search_alg.mode) or scheduler.mode
        self._runner = TrialSetup(fn, scaling, base, nested, self._run_config, name)
        self._runner.name_creator, self._runner.dirname_creator = (
            tc.trial_name_creator,
            tc.trial_dirname_creator,
        )
        self._stopper = as_stopper(self._run_config.stop)  # a TypeError before any trial
        self._restored = _restored
        self._experiment_path: str | None = _restored["path"] if _restored else None
        self._trials: list[Trial] = _restored["trials"] if _restored else []
        # How an interrupted fit() says to carry on ({name}, {path}); %%ray_tune says --resume.
        self._carry_on = (
            "call fit() on this Tuner again, or after a kernel restart "
            "Tuner.restore({path!r}, trainable).fit()"
        )
        self._results_at: str | None = None  # where an interrupted fit's ResultGrid is (the magic's name)

    # -- fit --------------------------------------------------------------------------------
    def fit(self) -> ResultGrid:
        """Run the experiment and return its :class:`ResultGrid`.

        An interrupt (Ctrl-C, the stop button) cancels every running trial (within about
        1 s, at most 2 s): interrupted trials are PAUSED, unstarted ones PENDING, and
        ``grid.interrupted`` is True. In a script ``fit()`` returns that grid, as Ray Tune
        does; in an IPython cell it raises ``TuneInterrupted`` (a KeyboardInterrupt, so
        *Run All* stops there) after printing how to carry on, the grid kept as
        ``tuner.get_results()`` and the exception's ``result_grid``. ``fit()`` again on this
        Tuner, or ``Tuner.restore(path, trainable).fit()`` after a kernel restart, carries on.

        Raises:
            TuneInterrupted: interrupted inside an IPython cell (see above).
            ValueError: trials report without ``TuneConfig.metric`` (naming what they reported),
                or a trial needs more workers than the cluster can hold.
            TypeError: ``RunConfig.callbacks`` holds something that is not a Callback (no trial started).
            CallbackError: a callback with ``fail_on_error = True`` raised (running trials cancelled).
            ClusterError: the head cannot be reached.
            UnpicklableError: the trainable reads something that cannot be shipped.
        """
        from ..client.connection import get_client

        callbacks = CallbackList(self._run_config.callbacks or ())  # a TypeError before any trial
        client = get_client()
        total_workers, concurrency = _plan_concurrency(
            client.status(), self._runner.scaling_config, self._tune_config.max_concurrent_trials
        )
        header = self._carry_on_and_prepare(client)
        path = self._experiment_path
        display = self._display_with_trials(total_workers)
        display.progress.set_trial_resources(getattr(self._runner.scaling_config, "cpus_per_worker", None))
        state = ExperimentState(path, header)
        for t in self._trials:
            state.mark(t)
        controller = self._controller_for(
            client, callbacks, concurrency, total_workers, header, state, display
        )
        self._controller = controller
        callbacks.setup(
            experiment_name=header["name"],
            experiment_path=path,
            kind="Tuner",
            metric=self._metric,
            mode=self._mode,
            num_samples=self._tune_config.num_samples,
        )
        display.display()
        try:
            controller.run()
        finally:
            bulk.release(self._runner.data_key)  # the trials' shared-memory data, on every node
            display.finish()
            state.close()
            callbacks.on_experiment_end()
            callbacks.close()
        self._restored = {"path": path, "trials": self._trials, "header": {**header, **state.header}}
        return self._grid_of(controller, header, callbacks)

    def _controller_for(self, client, callbacks, concurrency, total_workers, header, state, display):
        """The experiment's TuneController, wired to this Tuner's configs."""
        fail_fast = getattr(self._run_config.failure_config, "fail_fast", False)
        return TuneController(
            client=client,
            runner=self._runner,
            trials=self._trials,
            search_alg=self._search_alg,
            scheduler=StoppingScheduler(self._scheduler, self._stopper, fail_fast),
            metric=self._metric,
            mode=self._mode,
            num_samples=self._tune_config.num_samples,
            concurrency=concurrency,
            total_workers=total_workers,
            time_budget_s=self._tune_config.time_budget_s,
            experiment_path=self._experiment_path,
            exp_id=header["exp_id"],
            state=state,
            progress=display.progress,
            display=display,
            search_finished=bool(header.get("search_finished")),
            verbose=self._run_config.verbose,
            callbacks=callbacks,
        )

    def _carry_on_and_prepare(self, client) -> dict:
        """Before the trials run: paused trials of an earlier fit() requeued, the experiment's
        directory and state prepared, a restored experiment's orphan runs cancelled and the
        directories of trials that start over removed. Returns the experiment's header."""
        if self._restored is not None and not self._restored.get("fresh"):
            for t in self._trials:  # fit() again after an interrupt carries on, as restore does
                if t.status == PAUSED:
                    _requeue(t, from_checkpoint=True)
        header = self._prepare_experiment()
        if self._restored and self._restored.get("orphans"):
            _cancel_orphans(client, self._restored.pop("orphans"))
        for t in self._trials:  # restored trials that start over (see _requeue)
            if t.extra.pop("_wipe", False) and t.path:
                shutil.rmtree(t.path, ignore_errors=True)
        return header

    def _display_with_trials(self, total_workers: int):
        """The experiment's view (table or text), holding the trials it has so far."""
        display = views.tune_view(
            self._metric, self._mode, total_workers, varying_keys(self._param_space), self._run_config.verbose
        )
        for t in self._trials:
            display.progress.add_trial(t.trial_id, t.config)
            for r in t.results:
                display.progress.add_result(t.trial_id, r)
            display.progress.set_status(t.trial_id, t.status, t.error, bool(t.extra.get("early_stopped")))
        return display

    def _grid_of(self, controller, header: dict, callbacks) -> ResultGrid:
        """The experiment's ResultGrid; raises what the end calls for: an interrupt in a
        notebook cell (so Run All stops), a callback's error, ``fail_fast="raise"``'s error."""
        path = self._experiment_path
        grid = ResultGrid(self._trials, path, self._metric, self._mode, interrupted=controller.interrupted)
        stop = None
        if controller.interrupted:  # in a notebook cell: raised (Run All stops), else returned
            unfinished = sum(t.status in (PAUSED, PENDING) for t in self._trials)
            stop = report_interrupt(
                grid,
                grid.num_terminated,
                unfinished,
                self._carry_on.format(name=header["name"], path=path),
                self._results_at,
            )
        callbacks.check()  # a fail_on_error callback that raised at the very end
        if stop is not None:
            raise stop
        if controller.scheduler.raise_on_failure:  # FailureConfig(fail_fast="raise")
            raise grid.errors[0]
        return grid

    def _prepare_experiment(self) -> dict:
        """The experiment directory and state header (new, or the restored one)."""
        if self._restored is not None:
            return dict(self._restored["header"])
        rc = self._run_config
        name = rc.name or make_run_name(self._runner.name_prefix)
        path = experiment_dir(name, rc.storage_path)  # ValueError: an object store's URI
        make_private_dir(path)  # it holds pickled settings and trial configs: 0700, files 0600
        self._experiment_path = str(path)
        if self._settings_blob is not None:
            tmp = path / "tuner.pkl.tmp"
            with open(tmp, "wb", opener=private_opener) as f:
                f.write(self._settings_blob)
            tmp.replace(path / "tuner.pkl")
        elif self._settings_warning:
            sys.stderr.write(
                f"warning: {self._settings_warning}; Tuner.restore will need them passed again\n"
            )
        return {
            "name": name,
            "exp_id": uuid.uuid4().hex[:5],
            "metric": self._metric,
            **trainable_header(self._runner.name_prefix, self._runner.scaling_config),
            "mode": self._mode,
            "num_samples": self._tune_config.num_samples,
            "search_finished": False,
        }

    def get_results(self) -> ResultGrid:
        """The ResultGrid of the last ``fit()`` (or of the restored experiment).

        Raises:
            RuntimeError: nothing was run or restored yet."""
        if self._experiment_path is None:
            raise RuntimeError("Tuner.get_results(): call fit() first (or Tuner.restore(path, trainable))")
        if self._restored is not None and self._restored.get("fresh"):
            # Restored, not fitted yet: the experiment as stored, not as restore() queued it
            # to carry on (PENDING, results of trials that start over dropped).
            _, trials = read_state(self._experiment_path)
            for t in trials:
                if t.status == RUNNING:
                    _catch_up(t)
            return ResultGrid(trials, self._experiment_path, self._metric, self._mode)
        return ResultGrid(self._trials, self._experiment_path, self._metric, self._mode)

    # -- restore ------------------------------------------------------------------------------
    @classmethod
    def can_restore(cls, path: str) -> bool:
        """True if ``path`` holds a Tune experiment that ``restore`` can read."""
        return (Path(path).expanduser() / "experiment_state.json").exists()

    @classmethod
    def restore(
        cls,
        path: str,
        trainable,
        *,
        resume_unfinished: bool = True,
        resume_errored: bool = False,
        restart_errored: bool = False,
        param_space: dict | None = None,
    ) -> "Tuner":
        """A Tuner that continues the experiment in ``path`` (after an interrupt, a kernel
        restart or a crash); call ``.fit()`` on it.

        TERMINATED trials keep their results. PENDING trials start. Unfinished
        (PAUSED, or RUNNING when the kernel died) trials resume from their latest checkpoint,
        or start over without one. Trials the search had not created yet are created.

        Args:
            path (str): the experiment directory (``ResultGrid.experiment_path``).
            trainable: the same function or TorchTrainer (code is not stored with the experiment).
            resume_unfinished (bool): resume PAUSED/RUNNING trials (else they stay PAUSED).
            resume_errored (bool): resume ERROR trials from their latest checkpoint.
            restart_errored (bool): start ERROR trials over from scratch.
            param_space (dict | None): replaces the stored search space (needed only if it
                could not be pickled).

        Raises:
            FileNotFoundError: ``path`` holds no experiment state.
            ValueError: ``trainable`` is not the experiment's (another name, or other ranks or GPUs
                per trial).
        """
        path = str(Path(path).expanduser())
        header, trials = read_state(path)
        _, scaling, *_, name = _trainable_parts(trainable, None)
        check_same_trainable(header, name, scaling)  # before the stored space meets another trainable
        settings = read_tuner_file(path) or {}
        if param_space is not None:
            settings["param_space"] = param_space
        orphans = _requeue_restored(trials, resume_unfinished, resume_errored, restart_errored)
        tune_config = settings.get("tune_config") or TuneConfig(
            metric=header.get("metric"), mode=header.get("mode"), num_samples=header.get("num_samples", 1)
        )
        tuner = cls(
            trainable,
            param_space=settings.get("param_space"),
            tune_config=tune_config,
            run_config=settings.get("run_config"),
            _restored={"path": path, "trials": trials, "header": header, "fresh": True, "orphans": orphans},
        )
        tuner._replay(bool(header.get("search_finished")))
        return tuner

    def _replay(self, search_finished: bool) -> None:
        """Rebuild the scheduler's and searcher's view of the trials run so far."""
        inner = getattr(self._search_alg, "searcher", self._search_alg)
        if not search_finished and self._search_alg.counts_samples:
            # A generator that counts its own samples (grid x num_samples) starts over:
            # skip what it made before, so no grid point runs twice.
            for i in range(len(self._trials)):
                if inner.suggest(f"_replayed_{i}") == Searcher.FINISHED:
                    break
        add_point = getattr(self._search_alg, "add_evaluated_point", None)
        for t in self._trials:
            self._scheduler.on_trial_add(t)
            for r in t.results:
                self._scheduler.on_trial_result(t, r)  # its decisions are history now: ignored
            if t.status == TERMINATED:
                self._scheduler.on_trial_complete(t, t.last_result)
            elif t.status == ERROR:
                self._scheduler.on_trial_error(t)
            if add_point is not None and t.status in (TERMINATED, ERROR):
                add_point(t.config, t.last_result, error=t.status == ERROR)


def _cancel_orphans(client, run_ids: list[str], timeout: float = 5.0) -> None:
    """Cancel the runs of trials a dead kernel left running, and wait until the head has
    ended them (a trial's run cannot be resumed while it is live)."""
    from ..cluster.protocol import messages

    for run_id in run_ids:
        client.send(messages.CANCEL_RUN, {"run_id": run_id})
    deadline = time.monotonic() + timeout
    ids = set(run_ids)
    while time.monotonic() < deadline:
        live = [
            r for r in client.status().get("runs", []) if r["run_id"] in ids and r["state"] not in TERMINAL
        ]
        if not live:
            return
        time.sleep(0.05)


__all__ = ["Tuner", "TuneConfig"]


def _plan_concurrency(status: dict, scaling_config, max_concurrent: int | None) -> tuple[int, int]:
    """(the cluster's warm workers, how many trials may run at once) from a cluster status.

    Raises:
        ValueError: a trial needs more workers than the cluster can ever hold, or more GPUs
            than it has.
    """
    total_workers = len(status.get("workers", [])) or sum(n.get("num_workers", 0) for n in status["nodes"])
    capacity = sum(n.get("max_workers", 0) for n in status["nodes"]) or total_workers
    per_trial = getattr(scaling_config, "min_workers", scaling_config.num_workers)  # an elastic trial's min
    if per_trial > capacity:
        raise ValueError(
            f"each trial needs {per_trial} workers but the cluster holds at most {capacity}; "
            "lower ScalingConfig(num_workers=...) or add a node (`raynb node`)"
        )
    concurrency = max(1, total_workers // per_trial)
    if scaling_config.use_gpu:  # one GPU per rank: GPUs may be the tighter limit
        gpus = sum(len(n.get("gpus") or []) for n in status["nodes"])
        if gpus < per_trial:
            raise ValueError(
                f"each trial needs {per_trial} GPU(s) (use_gpu=True, one per rank) and the "
                f"cluster has {gpus}; use fewer workers per trial, use_gpu=False, or add a GPU node"
            )
        concurrency = min(concurrency, gpus // per_trial)
    cpus = getattr(scaling_config, "cpus_requested", None)
    node_cpus = sum(n.get("cpus") or 0 for n in status["nodes"])
    if cpus and node_cpus:  # Ray's: as many trials at once as the cluster's CPUs hold (fractions too)
        concurrency = min(concurrency, max(1, int(node_cpus // (cpus * per_trial))))
    if max_concurrent:
        concurrency = min(concurrency, max_concurrent)
    return total_workers, concurrency


def _with_tuner_kwargs(run_config: RunConfig, kwargs: dict | None) -> RunConfig:
    """Ray's internal ``Tuner(_tuner_kwargs=...)`` (Ray's own examples pass it): its
    ``fail_fast`` becomes ``FailureConfig(fail_fast=...)``.

    Raises:
        TypeError: a key other than ``fail_fast`` (not served).
    """
    import dataclasses

    kwargs = dict(kwargs or {})
    fail_fast = kwargs.pop("fail_fast", None)
    if kwargs:
        raise TypeError(
            f"Tuner(_tuner_kwargs=...): {sorted(kwargs)} not served (only 'fail_fast'); "
            "use TuneConfig / RunConfig fields instead"
        )
    if fail_fast is None:
        return run_config
    from ..train.config import FailureConfig

    failure = dataclasses.replace(run_config.failure_config or FailureConfig(), fail_fast=fail_fast)
    return dataclasses.replace(run_config, failure_config=failure)


def _pickled_settings(
    param_space, tune_config: TuneConfig, run_config: RunConfig
) -> tuple[bytes | None, str | None]:
    """The Tuner's settings pickled for Tuner.restore, or (None, why they cannot be)."""
    try:
        blob = cloudpickle.dumps(
            {"param_space": param_space, "tune_config": tune_config, "run_config": run_config}
        )
        return blob, None
    except Exception as e:  # noqa: BLE001 - only restore needs it
        return None, f"the Tuner's settings cannot be pickled for Tuner.restore ({type(e).__name__}: {e})"


def _search_alg_of(tc: TuneConfig) -> Searcher:
    """TuneConfig's search_alg (BasicVariantGenerator if none); TypeError if not a Searcher."""
    search_alg = tc.search_alg if tc.search_alg is not None else BasicVariantGenerator()
    if not isinstance(search_alg, Searcher):
        raise TypeError(
            f"TuneConfig(search_alg=...) takes a raynb.tune.search Searcher (e.g. "
            f"OptunaSearch, BasicVariantGenerator), got {type(search_alg).__name__}"
        )
    return search_alg


def _scheduler_of(tc: TuneConfig):
    """TuneConfig's scheduler (FIFOScheduler if none); TypeError if not a TrialScheduler."""
    from .schedulers import FIFOScheduler, TrialScheduler

    scheduler = tc.scheduler if tc.scheduler is not None else FIFOScheduler()
    if not isinstance(scheduler, TrialScheduler):
        raise TypeError(
            f"TuneConfig(scheduler=...) takes a raynb.tune.schedulers scheduler (e.g. "
            f"ASHAScheduler()), got {type(scheduler).__name__}"
        )
    return scheduler


def _set_search_properties(search_alg: Searcher, scheduler, tc: TuneConfig, param_space) -> None:
    """Tell the searcher and the scheduler TuneConfig's metric/mode (and the searcher the space).

    Raises:
        ValueError: either was created with a metric/mode other than TuneConfig's.
    """
    if not search_alg.set_search_properties(tc.metric, tc.mode, param_space, num_samples=tc.num_samples):
        raise ValueError(
            f"{type(search_alg).__name__} was created with metric={search_alg.metric!r}, "
            f"mode={search_alg.mode!r}, but TuneConfig says metric={tc.metric!r}, "
            f"mode={tc.mode!r}: give them in one place"
        )
    if not scheduler.set_search_properties(tc.metric, tc.mode):
        raise ValueError(
            f"{type(scheduler).__name__} was created with metric={scheduler.metric!r}, "
            f"mode={scheduler.mode!r}, but TuneConfig says metric={tc.metric!r}, "
            f"mode={tc.mode!r}: give them in one place"
        )


def _requeue_restored(
    trials: list[Trial], resume_unfinished: bool, resume_errored: bool, restart_errored: bool
) -> list[str]:
    """Tuner.restore's trials brought up to date and queued again as its flags say.

    Returns:
        list[str]: the run ids of trials that were RUNNING when the kernel died: runs that may
        still be live on the head, for fit() to cancel.
    """
    for t in trials:
        if t.status == RUNNING:
            _catch_up(t)
    orphans = [t.run_id for t in trials if t.status == RUNNING and t.run_id]
    for t in trials:
        if t.status in (RUNNING, PAUSED) and resume_unfinished:
            _requeue(t, from_checkpoint=True, wipe=False)
        elif t.status == ERROR and (restart_errored or resume_errored):
            t.error = None
            t.extra.pop("errors", None)
            _requeue(t, from_checkpoint=not restart_errored, wipe=False)
    return orphans
