"""ASHA: asynchronous successive halving (Li et al. 2018, arXiv:1810.05934), Ray's semantics."""

from __future__ import annotations

import math

import numpy as np

from .trial_scheduler import CONTINUE, STOP, TrialScheduler


class _Bracket:
    """One ASHA bracket: rungs at ``grace_period * rf**(k + s)`` up to ``max_t``.

    A trial reaching a rung is compared with the results recorded at that rung so far; it
    stops if it is below their ``1 - 1/rf`` quantile (the top ``1/rf`` go on).
    """

    def __init__(self, min_t: float, max_t: float, rf: float, s: int):
        self.rf = rf
        # 1e-9: log(8)/log(2) may come out as 2.9999...; the rung at max_t must still exist.
        n_rungs = int(math.log(max_t / min_t) / math.log(rf) - s + 1 + 1e-9)
        # Highest rung first: a trial is recorded at the highest rung it has newly passed.
        self.rungs = [(min_t * rf ** (k + s), {}) for k in reversed(range(n_rungs))]

    def milestones(self) -> list:
        return sorted(m for m, _ in self.rungs)

    def cutoff(self, recorded: dict):
        if not recorded:
            return None
        return float(np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100))

    def on_result(self, trial_id: str, cur_iter: float, score: float) -> str:
        action = CONTINUE
        for milestone, recorded in self.rungs:
            if cur_iter < milestone or trial_id in recorded:
                continue
            cutoff = self.cutoff(recorded)
            if cutoff is not None and score < cutoff:
                action = STOP
            recorded[trial_id] = score
            break
        return action

    def debug_str(self) -> str:
        return " | ".join(
            f"rung {m:g}: {len(r)} recorded, cutoff {self.cutoff(r)}" for m, r in reversed(self.rungs)
        )


class ASHAScheduler(TrialScheduler):
    """Asynchronous Successive Halving (ASHA), as Ray Tune's ``ASHAScheduler``.

    Li, Jamieson, Rostamizadeh, Gonina, Hardt, Recht, Talwalkar, "A System for Massively
    Parallel Hyperparameter Tuning", MLSys 2020, arXiv:1810.05934. Each trial is put in one
    of ``brackets`` brackets (Ray: at random, weighted towards brackets with more rungs).
    Bracket ``s`` has rungs at ``grace_period * reduction_factor**(k + s)`` (k = 0, 1, ...)
    up to ``max_t``. When a trial's ``time_attr`` first reaches a rung, its metric is
    compared with the values other trials recorded at that rung: below their
    ``(1 - 1/reduction_factor)`` quantile (linear interpolation, numpy) -> STOP. Every trial
    is stopped once ``time_attr >= max_t``. Decisions never wait for other trials.

    Args:
        time_attr (str): result key measuring training progress, e.g. "training_iteration"
            or "time_total_s" (seconds).
        metric (str | None): result key to optimise; may come from TuneConfig instead.
        mode (str | None): "min" or "max"; may come from TuneConfig instead.
        max_t (float): trials are stopped when ``time_attr`` reaches this, in units of
            ``time_attr``.
        grace_period (float): first rung; no trial is stopped before it.
        reduction_factor (float): keep roughly the top ``1/reduction_factor`` at each rung.
        brackets (int): number of brackets (1 = plain ASHA).
        stop_last_trials (bool): stop trials at ``max_t`` (Ray's default, True).
        seed (int | None): seeds the bracket assignment (a raynb addition; Ray uses the
            global numpy RNG).

    Raises:
        ValueError: bad ``mode``, ``max_t <= 0``, ``grace_period <= 0`` or ``> max_t``,
            ``reduction_factor <= 1``, ``brackets < 1``; and, on a result, a missing
            metric/mode or a metric not among the reported keys.
    """

    _needs_metric = True

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: float = 100,
        grace_period: float = 1,
        reduction_factor: float = 4,
        brackets: int = 1,
        stop_last_trials: bool = True,
        seed: int | None = None,
    ):
        super().__init__(metric, mode)
        if max_t <= 0:
            raise ValueError(f"max_t={max_t!r} must be > 0")
        if grace_period <= 0 or grace_period > max_t:
            raise ValueError(f"grace_period={grace_period!r} must be > 0 and <= max_t={max_t}")
        if reduction_factor <= 1:
            raise ValueError(f"reduction_factor={reduction_factor!r} must be > 1")
        if brackets < 1:
            raise ValueError(f"brackets={brackets!r} must be >= 1")
        self._time_attr = time_attr
        self._max_t = max_t
        self._grace_period = grace_period
        self._rf = reduction_factor
        self._stop_last_trials = stop_last_trials
        self._brackets = [_Bracket(grace_period, max_t, reduction_factor, s) for s in range(brackets)]
        self._rng = np.random.default_rng(seed)
        self._trial_bracket: dict[str, int] = {}
        self._stopped: set[str] = set()  # trials told to STOP that have not completed yet
        self._num_stopped = 0

    def bracket_of(self, trial) -> int:
        """Index ``s`` of the bracket ``trial`` was put in."""
        return self._trial_bracket[trial.trial_id]

    def milestones(self, s: int = 0) -> list:
        """Rung milestones of bracket ``s``, ascending (units of ``time_attr``)."""
        return self._brackets[s].milestones()

    def on_trial_add(self, trial) -> None:
        # Ray: softmax over the number of rungs, so brackets with more rungs get more trials.
        sizes = np.array([len(b.rungs) for b in self._brackets], dtype=float)
        probs = np.exp(sizes - sizes.max())
        self._trial_bracket[trial.trial_id] = int(
            self._rng.choice(len(self._brackets), p=probs / probs.sum())
        )

    def on_trial_result(self, trial, result: dict) -> str:
        self._check_result(result, self._time_attr)
        if trial.trial_id in self._stopped:
            return STOP  # a report made after the STOP (or a replay after a restore)
        if trial.trial_id not in self._trial_bracket:
            self.on_trial_add(trial)
        if result[self._time_attr] >= self._max_t and self._stop_last_trials:
            action = STOP
        else:
            bracket = self._brackets[self._trial_bracket[trial.trial_id]]
            action = bracket.on_result(trial.trial_id, result[self._time_attr], self._score(result))
        if action == STOP:
            self._num_stopped += 1
            self._stopped.add(trial.trial_id)
        return action

    def on_trial_complete(self, trial, result: dict) -> None:
        # A trial that ended by itself: its final result counts at its rung (as in Ray). For
        # one this scheduler stopped, the driver may pass a report made after the STOP; it
        # must not enter a rung the trial never earned.
        s = self._trial_bracket.pop(trial.trial_id, None)
        stopped = trial.trial_id in self._stopped
        self._stopped.discard(trial.trial_id)
        if s is not None and not stopped and self._usable(result, self._time_attr):
            self._brackets[s].on_result(trial.trial_id, result[self._time_attr], self._score(result))

    def on_trial_remove(self, trial) -> None:
        self._trial_bracket.pop(trial.trial_id, None)
        self._stopped.discard(trial.trial_id)

    on_trial_error = on_trial_remove

    def debug_string(self) -> str:
        lines = [f"Using AsyncHyperBand: num_stopped={self._num_stopped}"]
        lines += [f"Bracket {s}: {b.debug_str()}" for s, b in enumerate(self._brackets)]
        return "\n".join(lines)


AsyncHyperBandScheduler = ASHAScheduler
