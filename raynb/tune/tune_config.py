"""``TuneConfig``: how many trials, which search and scheduling, what to optimize."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class TuneConfig:
    """Tuning settings (``ray.tune.TuneConfig``).

    Args:
        metric (str | None): the reported metric to optimize; schedulers, search algorithms,
            the trial table and ``get_best_result`` default to it.
        mode ("min" | "max" | None): whether lower or higher ``metric`` is better; given
            together with ``metric``.
        search_alg (Searcher | None): where configs come from; None is
            ``BasicVariantGenerator()`` (random and grid search).
        scheduler (TrialScheduler | None): early stopping / PBT; None is ``FIFOScheduler()``.
        num_samples (int): repetitions of the search space (each repetition runs the whole
            grid), or the number of trials a search algorithm suggests; -1: no limit (end it
            with ``time_budget_s`` or an interrupt).
        max_concurrent_trials (int | None): the most trials running at once; None: as many
            as the cluster's warm workers hold (workers // workers per trial).
        time_budget_s (float | datetime.timedelta | None): seconds after which running trials
            are stopped and no new one starts.
        reuse_actors (bool): Ray's; accepted with no effect (raynb's workers are always warm
            and reused between trials).
        trial_name_creator (callable | None): ``f(trial) -> str``, the trial's name (``str(trial)``).
        trial_dirname_creator (callable | None): ``f(trial) -> str``, the trial's directory
            name under the experiment directory (``<trainable>_<trial_id>`` when None).

    Raises:
        ValueError: a bad mode, num_samples, max_concurrent_trials or time_budget_s.
        TypeError: a name creator that is not callable.
    """

    metric: str | None = None
    mode: str | None = None
    search_alg: Any = None
    scheduler: Any = None
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    time_budget_s: float | None = None
    reuse_actors: bool = False
    trial_name_creator: Any = None
    trial_dirname_creator: Any = None
    chdir_to_trial_dir: Any = None

    def __post_init__(self):
        import datetime

        from ..client.no_effect import accepted_no_effect

        if isinstance(self.time_budget_s, datetime.timedelta):
            self.time_budget_s = self.time_budget_s.total_seconds()
        if self.reuse_actors:
            accepted_no_effect(
                "TuneConfig(reuse_actors=True)", "raynb's workers are always warm and reused between trials"
            )
        if self.chdir_to_trial_dir is not None:
            raise ValueError(
                "TuneConfig(chdir_to_trial_dir=...) was removed in Ray 2.8 and is not served: "
                "a trial runs in the driver's working directory; use "
                "raynb.train.get_context().get_trial_dir() for its own directory"
            )
        for name in ("trial_name_creator", "trial_dirname_creator"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise TypeError(
                    f"TuneConfig({name}=...) takes a function f(trial) -> str, got "
                    f"{type(getattr(self, name)).__name__}"
                )
        if self.mode is not None and self.mode not in ("min", "max"):
            raise ValueError(f"TuneConfig(mode={self.mode!r}): use mode='min' or mode='max'")
        if self.metric is not None and not isinstance(self.metric, str):
            raise TypeError(f"TuneConfig(metric={self.metric!r}): give the metric's name (a str)")
        if (self.metric is None) != (self.mode is None):
            given, missing = ("metric", "mode='min' or 'max'") if self.metric else ("mode", "metric='<name>'")
            raise ValueError(f"TuneConfig got {given} but no {missing.split('=')[0]}: pass {missing} too")
        n = self.num_samples
        if not isinstance(n, int) or isinstance(n, bool) or (n < 1 and n != -1):
            raise ValueError(f"TuneConfig(num_samples={n!r}): give an integer >= 1, or -1 for no limit")
        m = self.max_concurrent_trials
        if m is not None and (not isinstance(m, int) or isinstance(m, bool) or m < 1):
            raise ValueError(f"TuneConfig(max_concurrent_trials={m!r}): give an integer >= 1, or None")
        b = self.time_budget_s
        if b is not None and (isinstance(b, bool) or not isinstance(b, (int, float)) or not b > 0):
            raise ValueError(f"TuneConfig(time_budget_s={b!r}): give a number of seconds > 0, or None")
