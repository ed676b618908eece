"""TuneConfig(trial_dirname_creator=...) must give each trial a directory of its own: a
name shared by two trials (their results and checkpoints overwrote each other; the second
trial's result had no metrics) or one no directory can have is refused, naming the fix."""

from __future__ import annotations

import pytest

from raynb.train import RunConfig, ScalingConfig
from raynb.tune.trial_setup import TrialSetup


def _setup(creator) -> TrialSetup:
    setup = TrialSetup(lambda config: None, ScalingConfig(num_workers=1), None, None, RunConfig(), "f")
    setup.dirname_creator = creator
    return setup


def test_a_dirname_given_to_two_trials_is_refused(tmp_path):
    setup = _setup(lambda trial: "same")
    first = setup.new_trial("e_00000", {}, str(tmp_path))
    assert first.path == str(tmp_path / "same")
    with pytest.raises(
        ValueError, match=r"returned 'same' for trial e_00001 and for trial e_00000: .*unique"
    ):
        setup.new_trial("e_00001", {}, str(tmp_path))


def test_unique_dirnames_are_kept(tmp_path):
    setup = _setup(lambda trial: f"t-{trial.trial_id}")
    paths = [setup.new_trial(f"e_{i:05d}", {}, str(tmp_path)).path for i in range(3)]
    assert paths == [str(tmp_path / f"t-e_{i:05d}") for i in range(3)]


@pytest.mark.parametrize("bad", ["", ".", "..", "../up", "a/b", "nul\0byte"])
def test_a_dirname_that_is_no_plain_name_is_refused(tmp_path, bad):
    with pytest.raises(ValueError, match=r"return a plain directory name"):
        _setup(lambda trial: bad).new_trial("e_00000", {}, str(tmp_path))
