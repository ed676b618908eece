"""The experiment state file is rebuilt in time proportional to the changes, not to the
changes times the trials: with thousands of trials, the driver's rewrites are spaced by
their own cost, and what was held back is on disk at close."""

from __future__ import annotations

import json

from raynb.tune.experiment_state import STATE_FILE, ExperimentState
from raynb.tune.trial import Trial


def test_rewrites_with_5000_trials_are_spaced_and_close_writes_the_last_change(tmp_path):
    state = ExperimentState(str(tmp_path), {"name": "scale"})
    trials = [Trial(trial_id=f"t{i:05d}", config={"x": i}) for i in range(5000)]
    for t in trials:
        state.mark(t)
    state.write()
    assert state.rebuilds == 1
    for i in range(500):  # as the driver's loop: one trial changes, then a write
        trials[i].status = "TERMINATED"
        state.mark(trials[i])
        state.write(created=5000)
    assert state.rebuilds < 100, state.rebuilds  # one each before: 501
    state.close()
    data = json.loads((tmp_path / STATE_FILE).read_text())
    assert len(data["trials"]) == 5000 and data["created"] == 5000
    assert [t["status"] for t in data["trials"][:501]] == ["TERMINATED"] * 500 + ["PENDING"]


def test_a_held_back_change_stays_dirty_until_it_is_written(tmp_path):
    state = ExperimentState(str(tmp_path), {"name": "scale"})
    t = Trial(trial_id="t0", config={})
    state.mark(t)
    state.write()
    state._next_build = float("inf")  # as right after a costly rebuild
    t.status = "ERROR"
    state.mark(t)
    state.write()
    assert state.dirty  # so the driver's loop calls write again once the spacing has passed
    state._next_build = 0.0
    state.write()
    assert not state.dirty
    state.close()
    assert json.loads((tmp_path / STATE_FILE).read_text())["trials"][0]["status"] == "ERROR"
