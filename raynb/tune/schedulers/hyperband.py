"""HyperBand (Li et al. 2017, JMLR, arXiv:1603.06560) with CONTINUE/STOP decisions only."""

from __future__ import annotations

import math

from .trial_scheduler import CONTINUE, STOP, TrialScheduler


class _Bracket:
    """Bracket ``s`` of HyperBand: ``n_0`` trials, rung ``i`` at ``r_i``, keep ``n_{i+1}``.

    ``n_i = floor(n_0 * eta**-i)`` and ``r_i = r_0 * eta**i`` (the paper's Algorithm 1);
    the last rung is ``max_t``, where every trial stops.
    """

    def __init__(self, s: int, n0: int, r0: int, eta: float, max_t: float):
        self.s = s
        self.n0 = n0
        self.sizes = [(int(n0 // eta**i), min(r0 * eta**i, max_t)) for i in range(s + 1)]
        self.sizes[-1] = (self.sizes[-1][0], max_t)
        # Decision rungs: (milestone r_i, how many may go on = n_{i+1}, {trial_id: score}).
        self.rungs = [(r, self.sizes[i + 1][0], {}) for i, (_, r) in enumerate(self.sizes[:-1]) if r < max_t]
        self.trial_ids: list[str] = []
        self.dropped: set[str] = set()

    def full(self) -> bool:
        return len(self.trial_ids) >= self.n0

    def on_result(self, trial_id: str, t: float, score: float) -> str:
        for milestone, keep, recorded in self.rungs:
            if t < milestone or trial_id in recorded:
                continue
            recorded[trial_id] = score
            # Best first; NaN counts as worst; ties go to the earlier arrival (dict order).
            order = sorted(recorded, key=lambda k: -recorded[k] if recorded[k] == recorded[k] else math.inf)
            # Anyone outside the top `keep` can no longer be promoted: later arrivals only
            # push it further down. Those already past the rung stop at their next result.
            self.dropped.update(order[keep:])
        return STOP if trial_id in self.dropped else CONTINUE


class HyperBandScheduler(TrialScheduler):
    """HyperBand's brackets of successive halving, deciding with CONTINUE/STOP only.

    Li, Jamieson, DeSalvo, Rostamizadeh, Talwalkar, "Hyperband: A Novel Bandit-Based
    Approach to Hyperparameter Optimization", JMLR 18 (2018), arXiv:1603.06560.
    With ``R = max_t`` and ``eta = reduction_factor``, bracket ``s`` (s = s_max .. 0,
    ``s_max + 1 = round(log_eta R) + 1`` as in Ray) takes ``n_0 = ceil((s_max+1)/(s+1) *
    eta**s)`` trials and has rungs ``r_i = R * eta**(i - s)`` where only the best
    ``n_{i+1} = floor(n_i / eta)`` of its trials go on (the paper's Table 1 for R=81,
    eta=3). Trials fill brackets in creation order, s_max first, cycling as in Ray.

    Difference from Ray's ``HyperBandScheduler``: Ray PAUSEs a trial at a rung until the
    whole bracket has reached it, then keeps the top ``n/eta``. raynb's driver has no PAUSE,
    so a trial at a rung is judged against the results already recorded there: if at least
    ``n_{i+1}`` trials of its bracket did better, it can never be in the top ``n_{i+1}`` and
    stops at once; otherwise it CONTINUEs, and is stopped at its next report if later
    arrivals push it out of the top ``n_{i+1}``. The trials that go past each rung are
    therefore the same as in synchronous HyperBand (given the same results); a trial may
    only train a little longer before it is stopped, and no worker sits idle waiting.
    Ray rounds ``n_{i+1}`` up; this class follows the paper (down).

    Args:
        time_attr (str): result key measuring progress (e.g. "training_iteration",
            or "time_total_s" in seconds).
        metric (str | None): result key to optimise; may come from TuneConfig instead.
        mode (str | None): "min" or "max"; may come from TuneConfig instead.
        max_t (float): R, the most ``time_attr`` a trial gets; trials stop there.
        reduction_factor (float): eta (> 1).
        stop_last_trials (bool): stop trials at ``max_t`` (Ray's default, True).

    Raises:
        ValueError: bad ``mode``, ``max_t < 1``, ``reduction_factor <= 1``; and, on a
            result, a missing metric/mode or a metric not among the reported keys.
    """

    _needs_metric = True

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: float = 81,
        reduction_factor: float = 3,
        stop_last_trials: bool = True,
    ):
        super().__init__(metric, mode)
        if max_t < 1:
            raise ValueError(f"max_t={max_t!r} must be >= 1")
        if reduction_factor <= 1:
            raise ValueError(f"reduction_factor={reduction_factor!r} must be > 1")
        self._time_attr = time_attr
        self._max_t = max_t
        self._eta = reduction_factor
        self._stop_last_trials = stop_last_trials
        self._s_max_1 = int(round(math.log(max_t) / math.log(reduction_factor))) + 1
        self._brackets: list[_Bracket] = []
        self._trial_bracket: dict[str, _Bracket] = {}
        self._stopped: set[str] = set()  # trial ids told to STOP

    def _new_bracket(self, s: int) -> _Bracket:
        n0 = int(math.ceil(self._s_max_1 / (s + 1) * self._eta**s))
        # 1e-9: 81 * 3**-4 is 0.99999... in floating point.
        r0 = max(1, int(self._max_t / self._eta**s + 1e-9))
        return _Bracket(s, n0, r0, self._eta, self._max_t)

    def bracket_table(self) -> list:
        """``[(n_i, r_i), ...]`` of every bracket, s = s_max first (the paper's Table 1)."""
        return [self._new_bracket(s).sizes for s in reversed(range(self._s_max_1))]

    def bracket_of(self, trial) -> int:
        """``s`` of the bracket ``trial`` was put in."""
        return self._trial_bracket[trial.trial_id].s

    def on_trial_add(self, trial) -> None:
        if trial.trial_id in self._trial_bracket:
            return
        if not self._brackets or self._brackets[-1].full():
            prev = self._brackets[-1].s if self._brackets else 0
            self._brackets.append(self._new_bracket(prev - 1 if prev > 0 else self._s_max_1 - 1))
        bracket = self._brackets[-1]
        bracket.trial_ids.append(trial.trial_id)
        self._trial_bracket[trial.trial_id] = bracket

    def on_trial_result(self, trial, result: dict) -> str:
        self._check_result(result, self._time_attr)
        self.on_trial_add(trial)
        t = result[self._time_attr]
        if trial.trial_id in self._stopped:
            return STOP  # a report made after the STOP (or a replay after a restore)
        if t >= self._max_t and self._stop_last_trials:
            action = STOP
        else:
            action = self._trial_bracket[trial.trial_id].on_result(trial.trial_id, t, self._score(result))
        if action == STOP:
            self._stopped.add(trial.trial_id)
        return action

    def debug_string(self) -> str:
        lines = [f"Using HyperBand: num_stopped={len(self._stopped)}"]
        for b in self._brackets:
            rungs = ", ".join(f"r={r:g}: {len(rec)} in, keep {keep}" for r, keep, rec in b.rungs)
            lines.append(f"Bracket s={b.s}: {len(b.trial_ids)}/{b.n0} trials; {rungs}")
        return "\n".join(lines)
