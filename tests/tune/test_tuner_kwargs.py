"""Ray's internal ``Tuner(_tuner_kwargs=...)``, which Ray's own examples pass:
``fail_fast`` becomes ``FailureConfig(fail_fast=...)``; another key names what is served."""

from __future__ import annotations

import pytest

from raynb import tune


def _trainable(config):
    tune.report({"x": 1})


def test_tuner_kwargs_fail_fast_becomes_the_failure_config():
    tuner = tune.Tuner(_trainable, _tuner_kwargs={"fail_fast": True})
    assert tuner._run_config.failure_config.fail_fast is True
    assert tune.Tuner(_trainable)._run_config.failure_config is None or (
        tune.Tuner(_trainable)._run_config.failure_config.fail_fast is False
    )


def test_tuner_kwargs_other_keys_are_refused_by_name():
    with pytest.raises(TypeError, match="'resume'.*fail_fast"):
        tune.Tuner(_trainable, _tuner_kwargs={"resume": True})
