"""The outcome of ``Tuner.fit()``: one ``Result`` per trial (Ray Tune's ``ResultGrid``)."""

from __future__ import annotations

import math
from typing import Iterator

from ..errors import RunError
from ..train.config import Result
from ..train.train_errors import run_error
from .search.variant_generator import flatten
from .trial import ERROR, TERMINATED, Trial

_SCOPES = ("last", "avg", "last-5-avg", "last-10-avg", "all")
# Fields the head adds to every report; not the user's metrics.
AUTO_KEYS = ("training_iteration", "timestamp", "time_total_s", "time_this_iter_s", "trial_id")


class TrialResult(Result):
    """A ``raynb.train.Result`` for one trial, plus its ``config``, ``trial_id`` and ``status``.

    ``metrics_dataframe`` (every report, one row each) is built on first use.
    """

    def __init__(self, trial: Trial, error: Exception | None = None):
        self._trial = trial
        self._df = None
        ckpt = None
        if trial.checkpoint:
            from ..train.checkpoint import Checkpoint

            ckpt = Checkpoint(trial.checkpoint)
        super().__init__(
            metrics=dict(trial.last_result) if trial.results else None,
            error=error,
            path=trial.path,
            checkpoint=ckpt,
            name=trial.trial_id,
            state=trial.status,
            time_total_s=trial.last_result.get("time_total_s"),
            _reports=trial.results,
            best_checkpoints=_best_checkpoints(trial),
            failures=list(trial.extra.get("failures") or []),
        )

    @property
    def metrics_dataframe(self):
        if self._df is None:
            import pandas as pd

            self._df = pd.DataFrame(list(self._trial.results))  # read from disk beyond the newest
        return self._df

    @metrics_dataframe.setter
    def metrics_dataframe(self, value):
        self._df = value

    @property
    def config(self) -> dict:
        """The trial's sampled config (for a TorchTrainer: ``{"train_loop_config": {...}}``)."""
        return self._trial.config

    @property
    def trial_id(self) -> str:
        return self._trial.trial_id

    @property
    def status(self) -> str:
        return self._trial.status

    def __repr__(self) -> str:
        return (
            f"Result(trial_id={self.trial_id!r}, status={self.status!r}, metrics={self.metrics!r}, "
            f"config={self.config!r}, path={self.path!r}, error={self.error!r})"
        )


def _best_checkpoints(trial: Trial) -> list:
    """(Checkpoint, metrics) of the trial's kept checkpoints, best first by the run's
    CheckpointConfig score (else oldest first), as ``raynb.train.Result`` has them."""
    from ..train.checkpoint import Checkpoint
    from ..train.config import _score_key

    records = [c for c in trial.extra.get("checkpoints") or [] if c.get("path")]
    best = [(Checkpoint(c["path"]), c.get("metrics") or {}) for c in records]
    cc = trial.extra.get("checkpoint_config") or {}
    if cc.get("checkpoint_score_attribute"):
        best.sort(key=_score_key(cc["checkpoint_score_attribute"], cc.get("checkpoint_score_order", "max")))
    return best


def _error_of(trial: Trial) -> RunError | None:
    if trial.status != ERROR:
        return None
    errors = trial.extra.get("errors") or [{"message": trial.error or "failed"}]
    return run_error(trial.trial_id, errors, state="FAILED")


class ResultGrid:
    """The trials of one experiment, in creation order.

    Args:
        trials (list[Trial]): the experiment's trials.
        experiment_path (str): the experiment directory.
        metric (str | None), mode ("min" | "max" | None): defaults for :meth:`get_best_result`
            (from ``TuneConfig``).
        interrupted (bool): ``fit()`` was interrupted; unfinished trials are PAUSED or PENDING
            and ``Tuner.restore(experiment_path, trainable)`` resumes them.

    ``len(grid)``, ``grid[i]`` (a :class:`TrialResult`, a ``raynb.train.Result``) and iteration
    work as on a list.
    """

    def __init__(
        self,
        trials: list[Trial],
        experiment_path: str,
        metric: str | None = None,
        mode: str | None = None,
        interrupted: bool = False,
    ):
        self._trials = list(trials)
        self.experiment_path = experiment_path
        self._metric = metric
        self._mode = mode
        self.interrupted = interrupted
        self._results = [TrialResult(t, _error_of(t)) for t in self._trials]

    def __len__(self) -> int:
        return len(self._results)

    def __getitem__(self, i) -> TrialResult:
        return self._results[i]

    def __iter__(self) -> Iterator[TrialResult]:
        return iter(self._results)

    @property
    def errors(self) -> list[RunError]:
        """The error of every trial that ended in ERROR."""
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self) -> int:
        return sum(t.status == ERROR for t in self._trials)

    @property
    def num_terminated(self) -> int:
        """Trials that ended without error (TERMINATED: returned, or stopped early)."""
        return sum(t.status == TERMINATED for t in self._trials)

    def get_best_result(
        self,
        metric: str | None = None,
        mode: str | None = None,
        scope: str = "last",
        filter_nan_and_inf: bool = True,
    ) -> TrialResult:
        """The trial with the best ``metric``.

        Args:
            metric (str | None): defaults to ``TuneConfig.metric``.
            mode ("min" | "max" | None): defaults to ``TuneConfig.mode``.
            scope (str): which of a trial's reports count: "last" (its last report), "avg"
                (the mean over all), "last-5-avg", "last-10-avg", or "all" (its best report).
            filter_nan_and_inf (bool): skip trials whose score is NaN or infinite.

        Raises:
            ValueError: no metric/mode here or in TuneConfig, a bad mode or scope.
            RuntimeError: no trial reported ``metric`` (naming the keys they did report).
        """
        metric = metric or self._metric
        mode = mode or self._mode
        if not metric or not mode:
            raise ValueError(
                "get_best_result() needs a metric and a mode: pass metric=... and "
                "mode='min'|'max', or set them in TuneConfig"
            )
        if mode not in ("min", "max"):
            raise ValueError(f"get_best_result(mode={mode!r}): use 'min' or 'max'")
        if scope not in _SCOPES:
            raise ValueError(f"get_best_result(scope={scope!r}): use one of {list(_SCOPES)}")
        best, best_score = None, None
        for r, t in zip(self._results, self._trials):
            score = _score(t.results, metric, mode, scope)
            if score is None or (filter_nan_and_inf and not math.isfinite(score)):
                continue
            if best is None or (score < best_score if mode == "min" else score > best_score):
                best, best_score = r, score
        if best is None:
            seen = sorted({k for t in self._trials for res in t.results for k in res if k not in AUTO_KEYS})
            if not any(t.results for t in self._trials):
                raise RuntimeError(
                    f"no trial reported anything, so none has a {metric!r}: call "
                    f"raynb.tune.report({{{metric!r}: ...}}) in the trainable"
                )
            raise RuntimeError(
                f"no trial reported a finite {metric!r}; the trials reported {seen}. "
                "Pick one of these keys, or report the metric with raynb.tune.report()"
            )
        return best

    def get_dataframe(self, filter_metric: str | None = None, filter_mode: str | None = None):
        """One row per trial: ``trial_id``, ``status``, ``config/<key>`` for each (flattened)
        config key, the trial's last reported metrics (with ``training_iteration`` and
        ``time_total_s``), ``path`` and ``error``.

        Args:
            filter_metric (str | None), filter_mode ("min" | "max" | None): give each trial's
                best report by this metric instead of its last.

        Returns:
            pandas.DataFrame
        """
        import pandas as pd

        if (filter_metric is None) != (filter_mode is None):
            raise ValueError("get_dataframe() takes filter_metric and filter_mode together")
        rows = []
        for t in self._trials:
            metrics = t.last_result
            if filter_metric is not None:
                scored = [r for r in t.results if _is_number(r.get(filter_metric))]
                if scored:
                    pick = min if filter_mode == "min" else max
                    metrics = pick(scored, key=lambda r: r[filter_metric])
            row = {"trial_id": t.trial_id, "status": t.status}
            row.update({f"config/{k}": v for k, v in flatten(t.config).items()})
            row.update({k: v for k, v in metrics.items() if k != "trial_id"})
            row.setdefault("training_iteration", None)
            row.setdefault("time_total_s", None)
            row["path"] = t.path
            row["error"] = t.error
            rows.append(row)
        return pd.DataFrame(rows)

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for t in self._trials:
            counts[t.status] = counts.get(t.status, 0) + 1
        return f"ResultGrid<{len(self)} trials: {counts}, experiment_path={self.experiment_path!r}>"


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _score(results, metric: str, mode: str, scope: str) -> float | None:
    """The score of a trial's reports (a ReportHistory or a list): "last" and the "last-N-avg"
    scopes from the reports in memory when they hold enough values, else from all."""
    need = {"last": 1, "last-5-avg": 5, "last-10-avg": 10}.get(scope)
    recent = list(getattr(results, "recent", results))
    values = [float(r[metric]) for r in recent if _is_number(r.get(metric))]
    if need is None or (len(values) < need and len(recent) < len(results)):
        values = [float(r[metric]) for r in results if _is_number(r.get(metric))]
    if not values:
        return None
    if scope == "last":
        return values[-1]
    if scope == "all":
        return min(values) if mode == "min" else max(values)
    window = {"avg": len(values), "last-5-avg": 5, "last-10-avg": 10}[scope]
    tail = values[-window:]
    return sum(tail) / len(tail)
