"""Ray Tune's class API (``ray.tune.Trainable``): ``setup`` / ``step`` / ``save_checkpoint`` /
``load_checkpoint`` / ``cleanup``, run as a function trainable on one warm worker.

Each ``step()`` result is one report (``training_iteration`` counts them). A trial ends when
a result says ``done``, or when the driver stops it (``RunConfig(stop=...)``, a scheduler,
the time budget). Checkpoints follow ``CheckpointConfig(checkpoint_frequency=N,
checkpoint_at_end=True)``: every N steps, and at the end when the trial ends by ``done`` or
by a ``stop`` dict (checked on the rank too, so the final checkpoint is written before the
driver's STOP arrives); a trial a callable stopper or a scheduler stops keeps its last
periodic checkpoint. PBT's exploit and a restore resume from the newest checkpoint through
``load_checkpoint``.
"""

from __future__ import annotations

import copy
import os
import tempfile

_DICT_FILE = "_trainable_state.pkl"  # save_checkpoint returned a dict: kept here, pickled
_ITER_FILE = "_trainable_iteration"


class Trainable:
    """Subclass it and override ``setup(config)``, ``step() -> dict``, and for checkpoints
    ``save_checkpoint(checkpoint_dir) -> dict | None`` and ``load_checkpoint(checkpoint)``.

    Attributes:
        config (dict): the trial's config.
        iteration (int), training_iteration (int): steps done so far.
    """

    def __init__(self, config: dict | None = None, logger_creator=None, storage=None):
        self.config = config or {}
        self._iteration = 0
        self.setup(copy.deepcopy(self.config))

    @property
    def iteration(self) -> int:
        return self._iteration

    training_iteration = iteration

    @property
    def trial_id(self) -> str:
        from ..train.session import get_context

        return "_".join(get_context().get_trial_name().rsplit("_", 2)[-2:])  # <trainable>_<exp>_<n>

    @property
    def trial_name(self) -> str:
        from ..train.session import get_context

        return get_context().get_trial_name()

    @property
    def logdir(self) -> str:
        from ..train.session import get_context

        return get_context().get_trial_dir()

    def get_config(self) -> dict:
        return self.config

    def setup(self, config: dict) -> None:
        """Initialize from the trial's config (a copy of ``self.config``)."""

    def step(self) -> dict:
        """One training iteration; its result is reported (``{"done": True}`` ends the trial)."""
        raise NotImplementedError(f"{type(self).__name__} must override step() -> dict")

    def save_checkpoint(self, checkpoint_dir: str) -> dict | None:
        """Write state into ``checkpoint_dir`` (or return a dict of it)."""
        raise NotImplementedError(f"{type(self).__name__} must override save_checkpoint() to be checkpointed")

    def load_checkpoint(self, checkpoint) -> None:
        """Restore from what ``save_checkpoint`` wrote (the directory) or returned (the dict)."""
        raise NotImplementedError(f"{type(self).__name__} must override load_checkpoint() to be restored")

    def cleanup(self) -> None:
        """Called once the trial's steps end."""

    def reset_config(self, new_config: dict) -> bool:
        return False


def class_trainable(cls, frequency: int = 0, at_end: bool = False, stop: dict | None = None):
    """A function trainable running ``cls`` (a :class:`Trainable` subclass) step by step."""

    def run(config):
        from ..train.checkpoint import Checkpoint
        from ..train.session import checkpoint_requested, get_checkpoint, report
        from .stopper import DictStopper

        trainable = cls(config)
        _restore(trainable, get_checkpoint())
        stopper = DictStopper(stop) if stop else None
        try:
            while True:
                result = dict(trainable.step() or {})
                trainable._iteration += 1
                ending = bool(result.get("done")) or (
                    stopper is not None
                    and stopper("", {**result, "training_iteration": trainable._iteration})
                )
                due = (
                    (frequency and trainable._iteration % frequency == 0)
                    or (ending and at_end)
                    or result.pop("should_checkpoint", False)  # ray.tune.result.SHOULD_CHECKPOINT
                    or checkpoint_requested()  # ... set by a driver Callback (on_trial_result)
                )
                if due:
                    with tempfile.TemporaryDirectory(prefix="trainable_ckpt_") as d:
                        _save(trainable, d)
                        report(result, checkpoint=Checkpoint.from_directory(d))
                else:
                    report(result)
                if ending:
                    return
        finally:
            trainable.cleanup()

    run.__name__ = run.__qualname__ = cls.__name__
    run._raynb_scaling = getattr(cls, "_raynb_scaling", None)  # with_resources
    run._raynb_class_trainable = True  # a driver Callback's SHOULD_CHECKPOINT reaches it
    return run


def _save(trainable: Trainable, directory: str) -> None:
    saved = trainable.save_checkpoint(directory)
    if isinstance(saved, dict):
        import cloudpickle

        with open(os.path.join(directory, _DICT_FILE), "wb") as f:
            cloudpickle.dump(saved, f)
    with open(os.path.join(directory, _ITER_FILE), "w") as f:
        f.write(str(trainable._iteration))


def _restore(trainable: Trainable, checkpoint) -> None:
    if checkpoint is None:
        return
    directory = checkpoint.path
    state = os.path.join(directory, _DICT_FILE)
    if os.path.exists(state):
        import cloudpickle

        with open(state, "rb") as f:  # written by _save in this trial's own run directory
            trainable.load_checkpoint(cloudpickle.load(f))
    else:
        trainable.load_checkpoint(directory)
    try:
        with open(os.path.join(directory, _ITER_FILE)) as f:
            trainable._iteration = int(f.read())
    except (OSError, ValueError):
        pass
