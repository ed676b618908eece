"""Ray Tune's callback interface: :class:`Callback`, and the trials its hooks are given.

``RunConfig(callbacks=[...])`` takes them, for ``TorchTrainer.fit()`` (an experiment of one
trial) and ``Tuner.fit()``. They run in the notebook process, on a thread of their own
(``callback_list.CallbackList``), never on the head or the ranks. The classes live under
``raynb.train`` because ``TorchTrainer`` drives them and ``train`` cannot import ``tune``
(see CONTRIBUTING.md); ``raynb.tune.Callback`` is this class.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


class CallbackError(RuntimeError):
    """A callback with ``fail_on_error = True`` raised: the run was stopped (its cause is
    the callback's exception)."""


class Callback:
    """Hooks called in the notebook process as an experiment runs (``ray.tune.Callback``).

    Override the ones you need, and accept ``**info`` in each (more keywords may come).
    The trial hooks get ``iteration`` (int: the experiment's events so far), ``trials``
    (list of :class:`TrialSnapshot`: the trials heard of so far, each as of its latest
    event) and ``trial`` (the :class:`TrialSnapshot` the event is about).

    The callbacks of a run are called one at a time, in the order of
    ``RunConfig(callbacks=[...])`` and of the events, on one thread of the notebook
    process: a slow callback delays the callbacks after it, never the training (the ranks
    and the notebook's event loop do not wait for it). ``fit()`` waits for them to catch
    up when the experiment ends, at most ``$RAYNB_CALLBACK_DRAIN_S`` seconds (30 by default).

    Errors: by default (``fail_on_error = False``) an exception in a hook is printed once,
    with its traceback, and that callback is skipped for the rest of the run; the training
    goes on. A callback with ``fail_on_error = True`` stops the run instead: it is
    cancelled (every running trial of a Tuner) and ``fit()`` raises :class:`CallbackError`.
    """

    fail_on_error: bool = False

    def setup(
        self, stop=None, num_samples: int | None = None, total_num_samples: int | None = None, **info
    ) -> None:
        """Before the first trial starts. ``info`` holds ``experiment_name``,
        ``experiment_path`` (the run directory of a TorchTrainer, the experiment's of a
        Tuner), ``kind`` (``"TorchTrainer"`` or ``"Tuner"``), ``metric`` and ``mode``."""

    def on_trial_start(self, iteration: int, trials: list, trial: "TrialSnapshot", **info) -> None:
        """A trial's run was submitted (again, after a PBT exploit or a resume)."""

    def on_trial_result(
        self, iteration: int, trials: list, trial: "TrialSnapshot", result: dict, **info
    ) -> None:
        """Rank 0 reported ``result`` (the metrics with ``training_iteration``,
        ``timestamp``, ``time_total_s``, ``time_this_iter_s``): a copy, yours to keep."""

    def on_trial_complete(self, iteration: int, trials: list, trial: "TrialSnapshot", **info) -> None:
        """A trial ended without an error: TERMINATED, or STOPPED by the scheduler."""

    def on_trial_error(self, iteration: int, trials: list, trial: "TrialSnapshot", **info) -> None:
        """A trial ended in ERROR (a rank raised or died; ``trial.error`` says why)."""

    def on_checkpoint(self, iteration: int, trials: list, trial: "TrialSnapshot", checkpoint, **info) -> None:
        """A checkpoint (``raynb.train.Checkpoint``) was committed in the trial's directory."""

    def on_experiment_end(self, trials: list, **info) -> None:
        """After the last trial ended (or the experiment was interrupted or failed)."""

    def flush(self) -> None:
        """raynb's addition: called when the callbacks have caught up (no event waiting)
        and before ``on_experiment_end``. A logger that batches its writes sends them here."""


class _Prefix(Sequence):
    """The first ``n`` items of a list that only grows: a trial's results as of an event,
    without copying them."""

    __slots__ = ("_items", "_n")

    def __init__(self, items: list, n: int):
        self._items, self._n = items, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self._items[: self._n][i]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("result index out of range")
        return self._items[i]

    def __repr__(self) -> str:
        return f"<{self._n} results>"


class TrialSnapshot:
    """A trial as a callback sees it: its fields at the moment of the event (the driver
    goes on changing the live trial meanwhile). ``str(trial)`` is its name, the name of
    its directory (``<trainable>_<trial_id>``, as Ray names trials).

    Attributes:
        trial_id (str): e.g. ``"3f2a1_00004"``.
        config (dict): the trial's config (a TorchTrainer's ``train_loop_config``).
        status (str): PENDING, RUNNING, PAUSED, TERMINATED, STOPPED or ERROR.
        path (str | None): the trial's directory (``local_path`` too, Ray's name).
        results (Sequence[dict]): its reports so far, oldest first.
        checkpoint (str | None): its latest committed checkpoint's directory.
        error (str | None): one line of why it failed, when ERROR.
        run_id (str | None): the raynb run executing it.
        errors (list[dict] | None): when ERROR, the run's failures (``RunError.errors``).
    """

    __slots__ = ("trial_id", "config", "status", "path", "results", "checkpoint", "error", "run_id", "errors")

    def __init__(
        self,
        trial_id: str,
        config: dict,
        status: str = "PENDING",
        path: str | None = None,
        results: Sequence | None = None,
        checkpoint: str | None = None,
        error: str | None = None,
        run_id: str | None = None,
        errors: list | None = None,
    ):
        self.trial_id, self.config, self.status, self.path = trial_id, config, status, path
        self.results = results if results is not None else []
        self.checkpoint, self.error, self.run_id = checkpoint, error, run_id
        self.errors = errors

    @classmethod
    def of(cls, trial) -> "TrialSnapshot":
        """The snapshot of ``trial`` (a ``raynb.tune.Trial`` or a snapshot) now: O(1)."""
        results = trial.results
        return cls(
            trial.trial_id,
            trial.config,
            trial.status,
            trial.path,
            _Prefix(results, len(results)),
            trial.checkpoint,
            trial.error,
            trial.run_id,
            _errors_of(trial),
        )

    @property
    def last_result(self) -> dict:
        """The latest report ({} before the first)."""
        return self.results[-1] if len(self.results) else {}

    @property
    def local_path(self) -> str | None:
        return self.path

    def metric(self, name: str, default: Any = None) -> Any:
        return self.last_result.get(name, default)

    def __str__(self) -> str:
        return Path(self.path).name if self.path else self.trial_id

    def __repr__(self) -> str:
        return f"Trial({str(self)!r}, status={self.status!r})"


def _errors_of(trial) -> list | None:
    """A trial's failures: a snapshot's ``errors``, a Tune ``Trial``'s ``extra["errors"]``."""
    errors = getattr(trial, "errors", None)
    if errors is None:
        errors = (getattr(trial, "extra", None) or {}).get("errors")
    return errors


def flatten(config, prefix: str = "", sep: str = "/") -> dict:
    """Nested dicts as one level, keys joined by ``sep`` (Ray's ``flatten_dict``):
    ``{"a": {"b": 1}}`` -> ``{"a/b": 1}``; lists are kept as values. Tune's search
    spaces and the loggers share it."""
    if not isinstance(config, dict):
        return {prefix: config} if prefix else {}
    out = {}
    for k, v in config.items():
        key = f"{prefix}{sep}{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(flatten(v, key, sep))
        else:
            out[key] = v
    return out


def check_callbacks(callbacks, where: str = "RunConfig(callbacks=...)") -> list:
    """``callbacks`` as a list, every item a :class:`Callback`.

    Raises:
        TypeError: ``callbacks`` is not a list or tuple, or an item is not a Callback (named
            by its type)."""
    if callbacks is None:
        return []
    if not isinstance(callbacks, (list, tuple)):
        raise TypeError(
            f"{where} takes a list of raynb.tune.Callback objects, got {type(callbacks).__name__}"
        )
    for i, cb in enumerate(callbacks):
        if isinstance(cb, type) and issubclass(cb, Callback):
            raise TypeError(
                f"{where}: item {i} is the class {cb.__name__}; pass an instance, {cb.__name__}()"
            )
        if not isinstance(cb, Callback):
            raise TypeError(
                f"{where}: item {i}, of type {type(cb).__name__}, is not a raynb.tune.Callback. "
                f"Pass instances "
                "of raynb.tune.Callback subclasses (e.g. raynb.tune.logger.TBXLoggerCallback(), "
                "raynb.integrations.MLflowLoggerCallback())"
            )
    return list(callbacks)
