"""Trial schedulers: pure decision logic on Trial objects and synthetic curves (no cluster).

The expected tables are computed by hand from the papers' rules (see each test's comments).
"""

import numpy as np
import pytest

from raynb.tune.schedulers import (
    CONTINUE,
    STOP,
    ASHAScheduler,
    Exploit,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
    TrialScheduler,
)
from raynb.tune.search.sample import choice, loguniform, uniform
from raynb.tune.trial import Trial

# Per-trial score; the metric at iteration t is score * t (monotone curves, mode="max").
SCORES = [5, 3, 8, 1, 6, 7.5, 2, 4]


def _trials(n, config=None):
    return [Trial(trial_id=f"t{i}", config=dict(config or {})) for i in range(n)]


def _result(t, value, metric="acc"):
    return {metric: value, "training_iteration": t, "time_total_s": float(t)}


def _run_sequential(sched, scores, max_iter):
    """Trials run one after another (one worker): returns the iteration each was stopped at."""
    trials = _trials(len(scores))
    for tr in trials:
        sched.on_trial_add(tr)
    stopped = {}
    for tr, s in zip(trials, scores):
        for t in range(1, max_iter + 1):
            res = _result(t, s * t)
            if sched.on_trial_result(tr, res) == STOP:
                stopped[tr.trial_id] = t
                sched.on_trial_complete(tr, res)
                break
    return [stopped.get(tr.trial_id) for tr in trials]


def _run_round_robin(sched, scores, max_iter):
    """All live trials report iteration t (in trial order) before any reports t + 1."""
    trials = _trials(len(scores))
    for tr in trials:
        sched.on_trial_add(tr)
    stopped = {}
    for t in range(1, max_iter + 1):
        for tr, s in zip(trials, scores):
            if tr.trial_id in stopped:
                continue
            res = _result(t, s * t)
            if sched.on_trial_result(tr, res) == STOP:
                stopped[tr.trial_id] = t
                sched.on_trial_complete(tr, res)
    return [stopped.get(tr.trial_id) for tr in trials]


# --- ASHA ---------------------------------------------------------------------------------


def test_asha_rf2_sequential_matches_hand_rung_table():
    # grace 1, rf 2, max_t 8 -> rungs 1, 2, 4, 8; cutoff = median (50th pct) of recorded.
    # t0 (5): rungs empty, runs to max_t=8.         r1={5} r2={10} r4={20}
    # t1 (3): r1 median{5}=5, 3<5 STOP@1.            r1={3,5}
    # t2 (8): r1 4 -> ok; r2 {10}: 16 ok; r4 {20}: 32 ok; STOP@8 (max_t)
    # t3 (1): r1 {3,5,8} median 5 -> STOP@1
    # t4 (6): r1 {1,3,5,8} median 4 ok; r2 {10,16} median 13, 12<13 STOP@2
    # t5 (7.5): r1 median 5 ok; r2 {10,12,16} median 12, 15 ok; r4 {20,32} median 26, 30 ok; @8
    # t6 (2): r1 {1,3,5,6,7.5,8} median 5.5 STOP@1;  t7 (4): r1 median 5 STOP@1
    sched = ASHAScheduler(metric="acc", mode="max", max_t=8, grace_period=1, reduction_factor=2)
    assert sched.milestones() == [1, 2, 4, 8]
    assert _run_sequential(sched, SCORES, 20) == [8, 1, 8, 1, 2, 8, 1, 1]


def test_asha_rf4_round_robin_matches_hand_rung_table():
    # grace 1, rf 4, max_t 16 -> rungs 1, 4, 16; cutoff = 75th percentile (linear) of recorded.
    # Scores 5, 3, 8, 1, 5.5, 7.5, 2, 4. t=1 in order:
    #   t0 5 (empty) ok | t1 3 vs pct75{5}=5 STOP | t2 8 vs {3,5}=4.5 ok |
    #   t3 1 vs {3,5,8}=6.5 STOP | t4 5.5 vs {1,3,5,8}=5.75 STOP (a median cutoff, 4, would
    #   keep it) | t5 7.5 vs {1,3,5,5.5,8}=5.5 ok | t6 2 vs {1,3,5,5.5,7.5,8}=7 STOP |
    #   t7 4 vs {1,2,3,5,5.5,7.5,8}=6.5 STOP
    # t=4: t0 20 (empty) ok | t2 32 vs {20} ok | t5 30 vs {20,32}=29 ok
    # t=16: t0, t2, t5 reach max_t -> STOP@16
    sched = ASHAScheduler(metric="acc", mode="max", max_t=16, grace_period=1, reduction_factor=4)
    assert sched.milestones() == [1, 4, 16]
    scores = [5, 3, 8, 1, 5.5, 7.5, 2, 4]
    assert _run_round_robin(sched, scores, 40) == [16, 1, 16, 1, 1, 16, 1, 1]


def test_asha_mode_min_is_the_mirror_image():
    # Negated curves with mode="min" must stop exactly the same trials.
    sched = ASHAScheduler(metric="loss", mode="min", max_t=8, grace_period=1, reduction_factor=2)
    trials = _trials(len(SCORES))
    out = []
    for tr, s in zip(trials, SCORES):
        sched.on_trial_add(tr)
        for t in range(1, 20):
            if sched.on_trial_result(tr, _result(t, -s * t, "loss")) == STOP:
                out.append(t)
                sched.on_trial_complete(tr, _result(t, -s * t, "loss"))
                break
    assert out == [8, 1, 8, 1, 2, 8, 1, 1]


def test_asha_max_t_stops_every_trial_and_time_attr_seconds():
    sched = ASHAScheduler(
        time_attr="time_total_s", metric="acc", mode="max", max_t=5.0, grace_period=1.0, reduction_factor=2
    )
    tr = Trial("a", {})
    sched.on_trial_add(tr)
    assert [
        sched.on_trial_result(tr, {"acc": 1.0, "time_total_s": s}) for s in (0.5, 1.5, 2.5, 4.9, 5.0)
    ] == [CONTINUE] * 4 + [STOP]


def test_asha_brackets_have_shifted_rungs_and_delay_stopping():
    sched = ASHAScheduler(
        metric="acc", mode="max", max_t=8, grace_period=1, reduction_factor=2, brackets=2, seed=0
    )
    assert sched.milestones(0) == [1, 2, 4, 8]
    assert sched.milestones(1) == [2, 4, 8]
    trials = _trials(200)
    for tr in trials:
        sched.on_trial_add(tr)
    share0 = np.mean([sched.bracket_of(tr) == 0 for tr in trials])
    # Ray's weights: softmax of the rung counts (4, 3) -> 1 / (1 + e^-1) = 0.731 in bracket 0.
    assert 0.63 < share0 < 0.83
    # In bracket 1 a trial worse than a bracket-1 predecessor survives t=1 (no rung) and
    # stops at t=2; brackets do not share rung results.
    b1 = [tr for tr in trials if sched.bracket_of(tr) == 1][:2]
    b0 = [tr for tr in trials if sched.bracket_of(tr) == 0][:1]
    assert sched.on_trial_result(b1[0], _result(1, 10)) == CONTINUE
    assert sched.on_trial_result(b1[0], _result(2, 20)) == CONTINUE
    assert sched.on_trial_result(b1[1], _result(1, 1)) == CONTINUE
    assert sched.on_trial_result(b0[0], _result(1, 1)) == CONTINUE  # empty rung in bracket 0
    assert sched.on_trial_result(b1[1], _result(2, 2)) == STOP


def test_asha_bracket_assignment_is_seeded():
    def assign(seed):
        s = ASHAScheduler(metric="acc", mode="max", max_t=64, reduction_factor=2, brackets=3, seed=seed)
        ts = _trials(50)
        for tr in ts:
            s.on_trial_add(tr)
        return [s.bracket_of(tr) for tr in ts]

    assert assign(1) == assign(1)
    assert assign(1) != assign(2)


# --- HyperBand ----------------------------------------------------------------------------


def test_hyperband_bracket_table_matches_paper_R81_eta3():
    # Li et al. 2017 (JMLR), Table 1: R = 81, eta = 3, (n_i, r_i) per bracket s = 4 .. 0.
    paper = [
        [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)],
        [(34, 3), (11, 9), (3, 27), (1, 81)],
        [(15, 9), (5, 27), (1, 81)],
        [(8, 27), (2, 81)],
        [(5, 81)],
    ]
    assert HyperBandScheduler(metric="acc", mode="max", max_t=81, reduction_factor=3).bracket_table() == paper


def test_hyperband_brackets_fill_in_order_and_cycle():
    sched = HyperBandScheduler(metric="acc", mode="max", max_t=9, reduction_factor=3)
    # R=9, eta=3: s=2 has 9 trials, s=1 ceil(3/2*3)=5, s=0 3; then s=2 again.
    assert [len(b) and b[0][0] for b in sched.bracket_table()] == [9, 5, 3]
    trials = _trials(9 + 5 + 3 + 1)
    for tr in trials:
        sched.on_trial_add(tr)
    assert [sched.bracket_of(tr) for tr in trials] == [2] * 9 + [1] * 5 + [0] * 3 + [2]


def test_hyperband_promotes_the_same_trials_as_synchronous_hyperband():
    # R=9, eta=3, bracket s=2: rung r=1 keeps floor(9/3)=3, rung r=3 keeps 1, r=9 = max_t.
    # Scores 5,3,8,1,6,7.5,2,4,9; round robin. At t=1 (arrival order, keep 3):
    #   t0 in | t1 in | t2 in | t3: 3 better -> STOP@1 | t4 6: pushes out t1 (stops @2) |
    #   t5 7.5: pushes out t0 (@2) | t6, t7 STOP@1 | t8 9: pushes out t4 (@2).
    # Synchronous HyperBand's top 3 at r=1: t8, t2, t5 -- the same survivors.
    # t=3 (keep 1): t2 24 in | t5 22.5 -> STOP@3 | t8 27 pushes out t2 (@4). t8 runs to 9.
    sched = HyperBandScheduler(metric="acc", mode="max", max_t=9, reduction_factor=3)
    assert _run_round_robin(sched, SCORES + [9], 20) == [2, 2, 4, 1, 2, 3, 1, 1, 9]


def test_hyperband_sequential_stops_on_arrival_when_outranked():
    # One worker: trials run one after another. Bracket s=2 (R=9): at r=1 keep 3, r=3 keep 1.
    # t0 5: in at r1 and r3, runs to 9 | t1 3: r1 in (2 recorded) ; r3: t0 15 > 9 -> STOP@3 |
    # t2 8: r1 in; r3 24 beats t0 (already done) -> on to 9 | t3 1: r1 3 better -> STOP@1 |
    # t4 6: r1 {8,6,5} top3 (t1 out); r3: t2 better -> STOP@3 | t5 7.5: r1 top3 -> on; r3 STOP@3 |
    # t6 2, t7 4: 3 better at r1 -> STOP@1 | t8 9: r1 in; r3 27 best -> runs to 9.
    sched = HyperBandScheduler(metric="acc", mode="max", max_t=9, reduction_factor=3)
    assert _run_sequential(sched, SCORES + [9], 20) == [9, 3, 9, 1, 3, 3, 1, 1, 9]


# --- Median stopping ----------------------------------------------------------------------


def test_median_stopping_rule():
    sched = MedianStoppingRule(metric="acc", mode="max", grace_period=2.0, min_samples_required=3)
    good = _trials(3)
    for tr in good:
        sched.on_trial_add(tr)
    # Three finished trials with constant accuracy 0.5, 0.6, 0.7 up to time 5 s.
    for tr, acc in zip(good, (0.5, 0.6, 0.7)):
        for t in range(1, 6):
            assert sched.on_trial_result(tr, _result(t, acc)) == CONTINUE or acc == 0.5
        sched.on_trial_complete(tr, _result(5, acc))
    bad, ok = Trial("bad", {}), Trial("ok", {})
    sched.on_trial_add(bad)
    sched.on_trial_add(ok)
    # Before and at the grace period nothing stops; after it, best 0.55 < median 0.6 -> STOP.
    assert sched.on_trial_result(bad, _result(1, 0.55)) == CONTINUE
    assert sched.on_trial_result(bad, _result(2, 0.55)) == CONTINUE
    assert sched.on_trial_result(bad, _result(3, 0.55)) == STOP
    # Best result (0.65 at t=1) counts, not the latest one.
    assert sched.on_trial_result(ok, _result(1, 0.65)) == CONTINUE
    assert sched.on_trial_result(ok, _result(3, 0.1)) == CONTINUE


def test_median_stopping_waits_for_min_samples_and_uses_running_mean():
    sched = MedianStoppingRule(
        time_attr="training_iteration", metric="loss", mode="min", grace_period=0, min_samples_required=2
    )
    a, b, c = _trials(3)
    for tr in (a, b, c):
        sched.on_trial_add(tr)
    # a and b: losses 1.0 then 3.0 (running mean 2.0 at t=2, last value 3.0).
    assert sched.on_trial_result(a, _result(1, 1.0, "loss")) == CONTINUE
    assert sched.on_trial_result(a, _result(2, 3.0, "loss")) == CONTINUE
    assert sched.on_trial_result(c, _result(1, 2.2, "loss")) == CONTINUE  # only 1 other
    # b at t=1: others a (mean 1.0) and c (2.2), median 1.6; b's 1.0 is better.
    assert sched.on_trial_result(b, _result(1, 1.0, "loss")) == CONTINUE
    assert sched.on_trial_result(b, _result(2, 3.0, "loss")) == CONTINUE  # only a reached 2
    # c at t=2: the others' running means are {2.0, 2.0}: median 2.0 and c's best 2.2 is
    # worse -> STOP. (Against the others' last values, median 3.0, it would have continued.)
    assert sched.on_trial_result(c, _result(2, 2.2, "loss")) == STOP
    assert sched.on_trial_result(c, _result(3, 0.0, "loss")) == STOP  # stays stopped


# --- PBT ----------------------------------------------------------------------------------


def _pbt_population(sched, n=4, lr=0.1):
    trials = [Trial(f"p{i}", {"lr": lr * (i + 1), "bs": 64}) for i in range(n)]
    for i, tr in enumerate(trials):
        tr.checkpoint = f"/ckpt/p{i}/checkpoint_000001"
        sched.on_trial_add(tr)
    return trials


def test_pbt_bottom_trial_exploits_top_checkpoint_and_perturbs():
    sched = PopulationBasedTraining(
        metric="acc",
        mode="max",
        perturbation_interval=2,
        hyperparam_mutations={"lr": uniform(1e-3, 1.0), "bs": [16, 32, 64, 128]},
        quantile_fraction=0.25,
        resample_probability=0.0,
        seed=3,
    )
    trials = _pbt_population(sched)
    scores = [0.1, 0.2, 0.3, 0.9]  # p3 is the top quarter, p0 the bottom
    for tr, s in zip(trials, scores):
        assert sched.on_trial_result(tr, _result(1, s)) == CONTINUE  # before the interval
    # At t=2 (the interval) the top and middle trials go first: they just CONTINUE.
    decisions = [sched.on_trial_result(tr, _result(2, s)) for tr, s in reversed(list(zip(trials, scores)))]
    assert decisions[:3] == [CONTINUE] * 3
    ex = decisions[3]
    assert isinstance(ex, Exploit)
    assert ex.checkpoint == "/ckpt/p3/checkpoint_000001" and ex.donor_id == "p3"
    # resample_probability=0: lr is the top trial's 0.4 times 0.8 or 1.2, bs a neighbour of 64.
    assert ex.config["lr"] == pytest.approx(0.4 * 0.8) or ex.config["lr"] == pytest.approx(0.4 * 1.2)
    assert ex.config["bs"] in (32, 128)
    assert trials[3].config == {"lr": pytest.approx(0.4), "bs": 64}  # the donor is not changed


def test_pbt_resample_draws_from_the_mutation_space():
    sched = PopulationBasedTraining(
        metric="loss",
        mode="min",
        perturbation_interval=2,
        hyperparam_mutations={"lr": loguniform(10.0, 20.0), "opt": choice(["a", "b", "c"])},
        resample_probability=1.0,
        seed=0,
    )
    trials = [Trial(f"p{i}", {"lr": 1.0, "opt": "zzz"}) for i in range(4)]
    for tr in trials:
        tr.checkpoint = f"/c/{tr.trial_id}"
        sched.on_trial_add(tr)
    for tr, loss in zip(trials, (0.1, 0.2, 0.3, 5.0)):
        assert sched.on_trial_result(tr, _result(1, loss, "loss")) == CONTINUE
    ex = sched.on_trial_result(trials[3], _result(2, 5.0, "loss"))  # worst at the interval
    assert isinstance(ex, Exploit) and ex.checkpoint == "/c/p0"
    assert 10.0 <= ex.config["lr"] < 20.0 and ex.config["opt"] in ("a", "b", "c")


def test_pbt_is_reproducible_with_a_seed_and_fills_missing_keys():
    def run(seed):
        sched = PopulationBasedTraining(
            metric="acc",
            mode="max",
            perturbation_interval=1,
            hyperparam_mutations={"lr": uniform(0.0, 1.0), "mom": [0.8, 0.9, 0.99], "wd": lambda: 0.5},
            seed=seed,
        )
        trials = [Trial(f"p{i}", {}) for i in range(8)]
        configs = []
        for tr in trials:
            tr.checkpoint = f"/c/{tr.trial_id}"
            sched.on_trial_add(tr)
            assert set(tr.config) == {"lr", "mom", "wd"}  # sampled on add, as in Ray
            configs.append(dict(tr.config))
        for t in range(1, 6):
            for i, tr in enumerate(trials):
                d = sched.on_trial_result(tr, _result(t, (i * 7919 % 8) + t))
                if isinstance(d, Exploit):
                    tr.config = d.config
                    configs.append((tr.trial_id, d.donor_id, dict(d.config)))
        return configs

    a = run(42)
    assert a == run(42)
    assert a != run(43)
    assert any(isinstance(c, tuple) for c in a)  # exploits happened


def test_pbt_skips_exploit_when_donor_has_no_checkpoint():
    sched = PopulationBasedTraining(
        metric="acc", mode="max", perturbation_interval=1, hyperparam_mutations={"lr": [0.1, 0.2]}, seed=0
    )
    trials = [Trial(f"p{i}", {"lr": 0.1}) for i in range(4)]
    for tr in trials:
        sched.on_trial_add(tr)
    assert [sched.on_trial_result(tr, _result(1, s)) for tr, s in zip(trials, (0.9, 0.5, 0.6, 0.1))] == [
        CONTINUE
    ] * 4


def test_pbt_rejects_bad_arguments():
    with pytest.raises(ValueError, match="hyperparam_mutations"):
        PopulationBasedTraining(metric="a", mode="max")
    with pytest.raises(ValueError, match="quantile_fraction"):
        PopulationBasedTraining(hyperparam_mutations={"x": [1]}, quantile_fraction=0.7)
    with pytest.raises(TypeError, match="'x'"):
        PopulationBasedTraining(hyperparam_mutations={"x": 3})


# --- FIFO and the shared interface --------------------------------------------------------


def test_fifo_never_stops_and_runs_in_order():
    sched = FIFOScheduler()
    sched.validate()  # needs no metric
    trials = _trials(5)
    for tr in trials:
        sched.on_trial_add(tr)
    assert all(sched.on_trial_result(tr, _result(t, -t)) == CONTINUE for tr in trials for t in range(1, 100))
    assert sched.choose_trial_to_run(trials[2:]) is trials[2]
    assert sched.choose_trial_to_run([]) is None


ALL = [
    lambda **kw: ASHAScheduler(**kw),
    lambda **kw: HyperBandScheduler(**kw),
    lambda **kw: MedianStoppingRule(**kw),
    lambda **kw: PopulationBasedTraining(hyperparam_mutations={"lr": [1, 2]}, **kw),
]


@pytest.mark.parametrize("make", ALL)
def test_bad_mode_is_rejected(make):
    with pytest.raises(ValueError, match="'maximize'"):
        make(metric="acc", mode="maximize")
    with pytest.raises(ValueError, match="'up'"):
        make().set_search_properties("acc", "up")


@pytest.mark.parametrize("make", ALL)
def test_missing_metric_or_mode_is_a_clear_error(make):
    sched = make()
    with pytest.raises(ValueError, match="metric=.*mode=.*TuneConfig"):
        sched.validate()
    tr = Trial("x", {})
    sched.on_trial_add(tr)
    with pytest.raises(ValueError, match="TuneConfig"):
        sched.on_trial_result(tr, _result(1, 0.5))
    half = make(metric="acc")
    with pytest.raises(ValueError, match="needs mode"):
        half.validate()


@pytest.mark.parametrize("make", ALL)
def test_set_search_properties(make):
    sched = make()
    assert sched.set_search_properties("acc", "max") is True
    assert (sched.metric, sched.mode) == ("acc", "max")
    sched.validate()
    assert sched.set_search_properties("loss", "max") is False  # conflicting metric
    assert sched.set_search_properties(None, None) is True
    own = make(metric="acc", mode="min")
    assert own.set_search_properties("acc", "max") is False
    assert (own.metric, own.mode) == ("acc", "min")


@pytest.mark.parametrize("make", ALL)
def test_unreported_metric_names_the_reported_keys(make):
    sched = make(metric="val_loss", mode="min")
    tr = Trial("x", {})
    sched.on_trial_add(tr)
    with pytest.raises(
        ValueError,
        match=r"'val_loss'.*\['loss', 'time_total_s', "
        r"'training_iteration'\]",
    ):
        sched.on_trial_result(tr, _result(1, 0.5, "loss"))
    assert "Using" in sched.debug_string()


def test_every_scheduler_is_a_trial_scheduler():
    for make in ALL:
        assert isinstance(make(metric="a", mode="max"), TrialScheduler)
    assert ASHAScheduler(time_attr="time_total_s").time_attr == "time_total_s"
    assert FIFOScheduler().time_attr is None


@pytest.mark.parametrize("make", ALL)
def test_non_numeric_metric_is_a_clear_error(make):
    sched = make(metric="acc", mode="max")
    tr = Trial("x", {})
    sched.on_trial_add(tr)
    with pytest.raises(ValueError, match="acc='high'.*must be a number"):
        sched.on_trial_result(tr, _result(1, "high"))
    sched.on_trial_complete(tr, {})  # an empty final result is tolerated


def test_explore_rules():
    from raynb.tune.schedulers.pbt import explore
    from raynb.tune.search.sample import randint

    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(50):
        new = explore(
            {"opt": "b", "name": "x", "n": 10, "sub": {"lr": 1.0}},
            {
                "opt": choice(["a", "b", "c"]),
                "name": lambda: "y",
                "n": randint(1, 100),
                "sub": {"lr": uniform(5.0, 6.0)},
            },
            resample_probability=0.0,
            rng=rng,
        )
        assert new["opt"] in ("a", "c")  # a neighbour of "b", never resampled
        assert new["name"] == "y"  # a string cannot be scaled: resampled
        assert new["n"] in (8, 12) and isinstance(new["n"], int)
        assert new["sub"]["lr"] in (pytest.approx(0.8), pytest.approx(1.2))
        seen.add((new["opt"], new["n"]))
    assert len(seen) == 4  # both directions and both factors occur


@pytest.mark.parametrize("counts", [(3, 4), (1, 3)])  # the count goes on / restarts at 1
def test_pbt_exploited_trial_waits_a_full_interval_before_the_next_exploit(counts):
    sched = PopulationBasedTraining(
        metric="acc",
        mode="max",
        perturbation_interval=2,
        hyperparam_mutations={"lr": [0.1, 0.2, 0.3, 0.4]},
        seed=0,
    )
    trials = _pbt_population(sched)
    scores = [0.1, 0.2, 0.3, 0.9]
    for tr, s in zip(trials, scores):
        sched.on_trial_result(tr, _result(1, s))
    for tr, s in reversed(list(zip(trials, scores))):
        assert sched.on_trial_result(tr, _result(2, s)) == CONTINUE or tr is trials[0]
    p0 = trials[0]
    # p0 was exploited at t=2 and stays the worst; nothing happens until a full interval of
    # its own count has passed after the restart.
    first, due = counts
    decisions = {t: sched.on_trial_result(p0, _result(t, 0.05)) for t in range(first, due + 1)}
    assert all(d == CONTINUE for t, d in decisions.items() if t < due), decisions
    assert isinstance(decisions[due], Exploit)


def test_asha_ignores_a_report_made_after_its_stop():
    # The driver passes the trial's last report to on_trial_complete, which may have been
    # made after the STOP (the run had not been cancelled yet). It must not enter rung 2.
    sched = ASHAScheduler(metric="acc", mode="max", max_t=8, grace_period=1, reduction_factor=2)
    a, b, c = _trials(3)
    for tr in (a, b, c):
        sched.on_trial_add(tr)
    for t in (1, 2):
        assert sched.on_trial_result(a, _result(t, 5 * t)) == CONTINUE  # r1={5}, r2={10}
    assert sched.on_trial_result(b, _result(1, 3)) == STOP  # 3 < 5
    assert sched.on_trial_result(b, _result(2, 30)) == STOP  # e.g. a replay
    sched.on_trial_complete(b, _result(2, 30))  # made after the STOP
    assert sched.on_trial_result(c, _result(1, 5.5)) == CONTINUE
    # r2 is still {10}: 11 goes on (with b's 30 counted, the median 20 would stop it).
    assert sched.on_trial_result(c, _result(2, 11)) == CONTINUE


def test_hyperband_results_after_a_stop_change_nothing():
    # R=9, eta=3, bracket s=2 keeps 3 at r=1 and 1 at r=3.
    sched = HyperBandScheduler(metric="acc", mode="max", max_t=9, reduction_factor=3)
    trials = _trials(5)
    for tr in trials:
        sched.on_trial_add(tr)
    for tr, s in zip(trials[:3], (5, 6, 7)):
        assert sched.on_trial_result(tr, _result(1, s)) == CONTINUE
    assert sched.on_trial_result(trials[3], _result(1, 1)) == STOP  # 3 better
    # Later reports of the stopped trial, however good, are not recorded at r=3 ...
    assert sched.on_trial_result(trials[3], _result(3, 100)) == STOP
    # ... so the first trial to reach r=3 is the best there and goes on.
    assert sched.on_trial_result(trials[0], _result(3, 15)) == CONTINUE
    assert sched.on_trial_result(trials[1], _result(3, 18)) == CONTINUE  # pushes trial 0 out
    assert sched.on_trial_result(trials[0], _result(4, 20)) == STOP
    assert sched.on_trial_result(trials[1], _result(9, 54)) == STOP  # max_t
    assert sched.on_trial_result(trials[1], _result(10, 60)) == STOP
    assert "num_stopped=3" in sched.debug_string()


def test_held_stops_send_each_cancel_once_on_its_commit_or_after_the_wait():
    from raynb.tune.held_stops import COMMIT_WAIT_S, HeldStops

    now, sent, notes = [0.0], [], []
    held = HeldStops(sent.append, notes.append, clock=lambda: now[0])
    for run_id in ("r1", "r2", "r3", "r5"):
        held.hold(run_id, run_id.replace("r", "t"), iteration=3)
    held.committed("r1", 2)  # an older report's checkpoint: still held
    assert sent == [] and "r1" in held
    held.committed("r1", 3)  # the one it waits for: cancelled now
    held.ended("r2")  # ended by itself: nothing to cancel
    held.committed("r2", 3)
    held.release("r5")  # its run restarted: the checkpoint is gone
    held.release_due()  # r3's wait is not over
    assert sent == ["r1", "r5"] and "r3" in held and "r2" not in held
    now[0] = COMMIT_WAIT_S
    held.release_due()  # over: cancelled without the checkpoint, and said so
    held.committed("r3", 3)
    assert sent == ["r1", "r5", "r3"] and "r3" not in held
    assert notes == [
        f"t3: stopped without the checkpoint of report 3, the one it was stopped on: "
        f"a rank had not reached it {COMMIT_WAIT_S:g} s after rank 0"
    ]
    held.hold("r4", "t4", iteration=1)
    held.release_all()  # the time budget: every held cancel goes now
    held.committed("r4", None)
    assert sent == ["r1", "r5", "r3", "r4"] and len(notes) == 1
    held.hold("r6", "t6", iteration=2)
    assert held.ended("r6", failed=True) is True and held.ended("r6", failed=True) is False
    assert held.ended("r1") is False and sent == ["r1", "r5", "r3", "r4"]
    assert notes[1].startswith("t6: a rank failed while its STOP waited for the checkpoint of report 2")
