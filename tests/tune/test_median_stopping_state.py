"""MedianStoppingRule keeps per trial only (time, score) floats: the same decisions as when
it kept every result dict (and as Ray 2.60's rule), in memory bounded per report."""

import random
import tracemalloc

import numpy as np
import pytest

from raynb.tune.schedulers import MedianStoppingRule
from raynb.tune.schedulers.trial_scheduler import CONTINUE, STOP
from raynb.tune.trial import Trial

# The streams include NaN and inf scores, whose means numpy warns about (as it did before).
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


class ResultListRule(MedianStoppingRule):
    """The rule as it was when it kept every result dict: the reference for its decisions."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self._results: dict[str, list] = {}

    def on_trial_result(self, trial, result):
        self._check_result(result, self._time_attr)
        if trial.trial_id in self.would_stop:
            return STOP if self._hard_stop else CONTINUE
        t = result[self._time_attr]
        self._score(result)
        self._results.setdefault(trial.trial_id, []).append(result)
        if t < self._grace_period:
            return CONTINUE
        others = [
            tid for tid, rs in self._results.items() if tid != trial.trial_id and rs[-1][self._time_attr] >= t
        ]
        if len(others) < self._min_samples_required:
            return CONTINUE
        means = [m for m in (self._old_running_mean(tid, t) for tid in others) if m is not None]
        if len(means) < self._min_samples_required:
            return CONTINUE
        median = float(np.median(means))
        best = max(self._score(r) for r in self._results[trial.trial_id])
        if best < median and t > self._grace_period:
            self.would_stop.add(trial.trial_id)
            return STOP if self._hard_stop else CONTINUE
        return CONTINUE

    def on_trial_complete(self, trial, result):
        if trial.trial_id not in self.would_stop and self._usable(result, self._time_attr):
            rs = self._results.setdefault(trial.trial_id, [])
            if not rs or rs[-1] != result:
                rs.append(result)

    def on_trial_error(self, trial):
        pass

    on_trial_remove = on_trial_error

    def _old_running_mean(self, trial_id, t):
        scoped = [
            self._score(r) for r in self._results[trial_id] if self._grace_period <= r[self._time_attr] <= t
        ]
        return float(np.mean(scoped)) if scoped else None


def _stream(seed: int, n_trials: int = 12, reports: int = 600, ties: bool = True, nonfinite: bool = True):
    """A fixed random interleaving of reports: ("result"|"complete"|"error", trial index, result).

    Times rise per trial by random steps (ints and floats, repeats allowed); scores are drawn
    from a few values when ``ties`` (so medians and bests tie), with NaN/inf when ``nonfinite``.
    """
    rng = random.Random(seed)
    times = [0.0] * n_trials
    done: set[int] = set()
    events = []
    for _ in range(reports):
        live = [i for i in range(n_trials) if i not in done]
        if not live:
            break
        i = rng.choice(live)
        times[i] += rng.choice([0, 1, 1, 2, 0.5, 1.25]) if ties else rng.uniform(0.01, 2.0)
        if ties:
            score = rng.choice([0.1, 0.2, 0.3, 0.5, 0.5, 0.8, 1.0])
            if nonfinite and rng.random() < 0.02:
                score = rng.choice([float("nan"), float("inf"), float("-inf")])
        else:
            score = rng.gauss(i / n_trials, 0.3)
        result = {"loss": score, "time_total_s": times[i], "training_iteration": int(times[i])}
        events.append(("result", i, result))
        roll = rng.random()
        if roll < 0.02:
            done.add(i)
            # Half the time the driver passes the last report again, else a new final one.
            final = result if rng.random() < 0.5 else dict(result, loss=score / 2, time_total_s=times[i] + 1)
            events.append(("complete", i, final))
        elif roll < 0.03:
            done.add(i)
            events.append(("error", i, None))
    return events


def _decisions(sched, events, n_trials: int = 12, feed_stopped: bool = True):
    """Play ``events`` into ``sched``; its decision for each report, in order."""
    trials = [Trial(f"t{i}", {}) for i in range(n_trials)]
    for tr in trials:
        sched.on_trial_add(tr)
    stopped, out = set(), []
    for kind, i, result in events:
        if kind == "result":
            if i in stopped and not feed_stopped:
                continue
            d = sched.on_trial_result(trials[i], result)
            out.append(d)
            if d == STOP:
                stopped.add(i)
        elif kind == "complete":
            sched.on_trial_complete(trials[i], result)
        else:
            sched.on_trial_error(trials[i])
    return out


CASES = [
    dict(grace_period=0.0, min_samples_required=1),
    dict(grace_period=2.0, min_samples_required=3),
    dict(grace_period=5.0, min_samples_required=2, hard_stop=False),
    dict(grace_period=1.0, min_samples_required=4, time_attr="training_iteration"),
]


@pytest.mark.parametrize("mode", ["min", "max"])
@pytest.mark.parametrize("kw", CASES)
def test_decisions_match_the_rule_that_kept_every_result(kw, mode):
    stops = 0
    for seed in range(3):
        events = _stream(seed)
        new_rule = MedianStoppingRule(metric="loss", mode=mode, **kw)
        old_rule = ResultListRule(metric="loss", mode=mode, **kw)
        assert _decisions(new_rule, events) == _decisions(old_rule, events), f"seed {seed}: decisions differ"
        assert new_rule.would_stop == old_rule.would_stop
        stops += len(new_rule.would_stop)
    assert stops, "the streams must exercise a stop"


class _RayTrial:
    """What Ray's MedianStoppingRule reads of a trial: a hashable with a trial_id."""

    def __init__(self, trial_id):
        self.trial_id = trial_id

    def __repr__(self):
        return self.trial_id


class _NoLiveTrials:
    def get_live_trials(self):
        return []


@pytest.mark.parametrize("mode", ["min", "max"])
def test_decisions_match_ray_on_finite_scores(mode):
    """Ray's class, run directly (no cluster), on the same stream. Where Ray's rule differs
    by design (it may stop at t == grace_period; it drops non-finite means; it keeps results
    after a STOP or a repeated final result), the stream avoids it: finite scores, times
    never equal to the grace period, no reports after a STOP, distinct final results."""
    ray_schedulers = pytest.importorskip("ray.tune.schedulers")
    # A final result equal to the last report is passed again as a fresh dict with a later time.
    fixed, last = [], {}
    for k, i, r in _stream(7, reports=800, ties=False, nonfinite=False):
        if k == "complete" and r is last.get(i):
            r = dict(r, time_total_s=r["time_total_s"] + 0.5)
        if k == "result":
            last[i] = r
        fixed.append((k, i, r))
    kw = dict(metric="loss", mode=mode, grace_period=1.5, min_samples_required=3)
    ours = _decisions(MedianStoppingRule(**kw), fixed, feed_stopped=False)

    ray_rule = ray_schedulers.MedianStoppingRule(**kw)
    controller, trials, stopped, theirs = _NoLiveTrials(), {}, set(), []
    for k, i, r in fixed:
        tr = trials.setdefault(i, _RayTrial(f"t{i}"))
        if k == "result" and i not in stopped:
            d = ray_rule.on_trial_result(controller, tr, r)
            theirs.append(STOP if d == ray_schedulers.TrialScheduler.STOP else CONTINUE)
            if d == ray_schedulers.TrialScheduler.STOP:
                stopped.add(i)
        elif k == "complete" and i not in stopped:
            ray_rule.on_trial_complete(controller, tr, r)
    assert ours == theirs
    assert STOP in ours and CONTINUE in ours


def test_memory_per_report_is_bounded():
    """100,000 reports from 100 trials: the rule holds at most 64 bytes a report (a result
    dict alone is several times that), so a long sweep does not grow with its history."""
    n_trials, per_trial = 100, 1000
    trials = [Trial(f"t{i}", {}) for i in range(n_trials)]
    # A grace period past every report keeps the test on storage, not on decisions.
    sched = MedianStoppingRule(metric="loss", mode="min", grace_period=1e9)
    for tr in trials:
        sched.on_trial_add(tr)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for step in range(per_trial):
            for i, tr in enumerate(trials):
                sched.on_trial_result(
                    tr, {"loss": (i * step) % 7 / 7.0, "time_total_s": step + 0.5, "x": step}
                )
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    per_report = held / (n_trials * per_trial)
    assert per_report < 64, f"{per_report:.1f} bytes held a report"
