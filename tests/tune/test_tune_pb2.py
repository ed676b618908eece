"""PB2 (Population Based Bandits): PBT's exploit with a GP-UCB choice of the new
hyperparameters, on Trial objects and a synthetic reward (no cluster)."""

from __future__ import annotations

import pytest

from raynb import tune
from raynb.tune.schedulers import PB2, Exploit, PopulationBasedTrainingReplay
from raynb.tune.trial import Trial


def _population(sched, lrs):
    trials = [Trial(trial_id=f"p{i}", config={"lr": lr, "other": 1}) for i, lr in enumerate(lrs)]
    for tr in trials:
        tr.checkpoint = f"/ckpt/{tr.trial_id}"
        sched.on_trial_add(tr)
    return trials


def test_pb2_moves_the_bottom_trial_towards_the_better_rate():
    # The score grows by lr-dependent steps: the best rate is near 0.8 of the range.
    def gain(lr):
        return 1.0 - (lr - 0.8) ** 2

    sched = PB2(
        metric="acc", mode="max", perturbation_interval=4, hyperparam_bounds={"lr": [0.0, 1.0]}, seed=0
    )
    trials = _population(sched, [0.05, 0.3, 0.6, 0.8])
    score = {tr.trial_id: 0.0 for tr in trials}
    exploits = []
    for t in range(1, 13):
        for tr in trials:
            score[tr.trial_id] += gain(tr.config["lr"])
            decision = sched.on_trial_result(tr, {"acc": score[tr.trial_id], "training_iteration": t})
            if isinstance(decision, Exploit):
                exploits.append(decision)
                tr.config = decision.config
                score[tr.trial_id] = score[decision.donor_id]
    assert exploits, "the bottom trial never exploited"
    chosen = [e.config["lr"] for e in exploits]
    assert all(0.0 <= lr <= 1.0 for lr in chosen) and all(e.config["other"] == 1 for e in exploits)
    assert abs(chosen[-1] - 0.8) < 0.3, chosen  # the GP's pick, not the bottom trial's 0.05


def test_pb2_bad_bounds_and_replay_are_named():
    with pytest.raises(ValueError, match="hyperparam_bounds"):
        PB2(metric="a", mode="max")
    with pytest.raises(ValueError, match=r"\['lr'\]"):
        PB2(metric="a", mode="max", hyperparam_bounds={"lr": [1, 0]})
    with pytest.raises(NotImplementedError, match="policy"):
        PopulationBasedTrainingReplay("pbt_policy_x.txt")
    assert type(tune.create_scheduler("pb2", hyperparam_bounds={"lr": [0, 1]})).__name__ == "PB2"
