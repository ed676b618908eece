"""``ray.tune.utils.validate_save_restore``: check a ``Trainable`` class's save/restore
round trip before tuning it."""

from __future__ import annotations

import tempfile


def validate_save_restore(trainable_cls: type, config: dict | None = None, num_gpus: int = 0) -> bool:
    """Train one instance of ``trainable_cls`` three steps, save it, restore a second
    instance from that checkpoint and train it two steps: its ``training_iteration`` must
    go on at 4 and 5 (Ray's check). raynb runs both instances in this process, one after
    the other (Ray runs them as two actors); ``num_gpus`` is accepted for Ray's signature.

    Args:
        trainable_cls (type): a ``raynb.tune.Trainable`` subclass.
        config (dict | None): the config both instances get.
        num_gpus (int): ignored.

    Returns:
        bool: True when the round trip succeeded.

    Raises:
        AssertionError: the restored instance does not go on from the saved iteration.
    """
    from ...train.checkpoint import Checkpoint
    from ..trainable import _restore, _save

    first = trainable_cls(config=config)
    for _ in range(3):
        first.step()
        first._iteration += 1
    second = trainable_cls(config=config)
    try:
        with tempfile.TemporaryDirectory(prefix="validate_save_restore_") as d:
            _save(first, d)
            _restore(second, Checkpoint.from_directory(d))
        for expected in (4, 5):
            second.step()
            second._iteration += 1
            assert second.training_iteration == expected, (
                f"{trainable_cls.__name__} restored from a checkpoint at iteration 3 reports "
                f"training_iteration {second.training_iteration}, not {expected}: "
                "save_checkpoint / load_checkpoint lose its state"
            )
    finally:
        first.cleanup()
        second.cleanup()
    return True
