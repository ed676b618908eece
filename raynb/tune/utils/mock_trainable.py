"""A toy class trainable (``ray.tune.utils.mock_trainable``), used by Ray's examples."""

from __future__ import annotations

import json
import math
import os
import time

from ..trainable import Trainable

MOCK_TRAINABLE_NAME = "mock_trainable"
MOCK_ERROR_KEY = "mock_error"


class MyTrainableClass(Trainable):
    """A learning curve ``height * tanh(t / width)`` reported as ``episode_reward_mean``
    (t: the step, 1-based).

    Config keys: ``width`` (default 1), ``height`` (default 1), ``sleep`` (seconds per step,
    default 0), ``mock_error`` (bool: raise RuntimeError after the first step unless
    restored), ``persistent_error`` (bool: raise even when restored).
    Checkpoints hold the step as JSON in ``checkpoint``.
    """

    def setup(self, config: dict) -> None:
        self._sleep_time = config.get("sleep", 0)
        self._mock_error = config.get(MOCK_ERROR_KEY, False)
        self._persistent_error = config.get("persistent_error", False)
        self.timestep = 0
        self.restored = False

    def step(self) -> dict:
        if self._mock_error and self.timestep > 0 and (self._persistent_error or not self.restored):
            raise RuntimeError(f"MyTrainableClass fails on purpose (mock_error) at timestep {self.timestep}")
        if self._sleep_time > 0:
            time.sleep(self._sleep_time)
        self.timestep += 1
        width = self.config.get("width", 1)
        return {"episode_reward_mean": math.tanh(self.timestep / width) * self.config.get("height", 1)}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        with open(os.path.join(checkpoint_dir, "checkpoint"), "w") as f:
            json.dump({"timestep": self.timestep}, f)

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        with open(os.path.join(checkpoint_dir, "checkpoint")) as f:
            self.timestep = json.load(f)["timestep"]
        self.restored = True
