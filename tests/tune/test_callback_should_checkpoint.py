"""A driver ``Callback`` that sets Ray's ``SHOULD_CHECKPOINT`` in ``on_trial_result`` makes a
class ``Trainable``'s trial checkpoint at its next step (Ray saves it before the next one);
a function trainable's is told once that it checkpoints when it reports one."""

from __future__ import annotations

import time
from pathlib import Path

from raynb import tune
from raynb.train import RunConfig
from raynb.tune.result import SHOULD_CHECKPOINT

ASK_AT = 2
STEPS = 12


class Counter(tune.Trainable):
    def setup(self, config):
        self.count = 0

    def step(self):
        time.sleep(0.25)
        self.count += 1
        return {"count": self.count}

    def save_checkpoint(self, checkpoint_dir):
        return {"count": self.count}

    def load_checkpoint(self, checkpoint):
        self.count = checkpoint["count"]


class AskOnce(tune.Callback):
    def __init__(self):
        self.checkpoints = []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result["training_iteration"] == ASK_AT:
            result[SHOULD_CHECKPOINT] = True

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        self.checkpoints.append(checkpoint.path)


def _fit(trainable, callback, tmp_path):
    return tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(metric="count", mode="max"),
        run_config=RunConfig(
            name="ask", storage_path=str(tmp_path), stop={"training_iteration": STEPS}, callbacks=[callback]
        ),
    ).fit()


def test_a_callbacks_should_checkpoint_checkpoints_a_class_trainable(warm, tmp_path):
    callback = AskOnce()
    (result,) = list(_fit(Counter, callback, tmp_path))
    assert result.error is None, result.error
    assert result.metrics["count"] == STEPS
    # One checkpoint, taken after the request reached the rank: later than the step that
    # triggered it, before the trial ended (no periodic or final checkpoint was asked for).
    dirs = sorted(p.name for p in Path(result.path).glob("checkpoint_*"))
    assert len(dirs) == 1, dirs
    assert len(callback.checkpoints) == 1, callback.checkpoints
    import cloudpickle

    saved = next(Path(result.checkpoint.path).glob("*.pkl"), None)
    assert saved is not None, list(Path(result.checkpoint.path).iterdir())
    count = cloudpickle.loads(saved.read_bytes())["count"]
    assert ASK_AT < count < STEPS, count


def _function(config):
    for i in range(4):
        time.sleep(0.1)
        tune.report({"count": i + 1})


def test_a_function_trainable_is_told_once(warm, tmp_path, capfd):
    callback = AskOnce()
    (result,) = list(_fit(_function, callback, tmp_path))
    assert result.error is None and result.checkpoint is None
    err = capfd.readouterr().err
    assert err.count("SHOULD_CHECKPOINT") == 1 and "report(..., checkpoint=...)" in err, err[-2000:]
