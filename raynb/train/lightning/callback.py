"""``RayTrainReportCallback``: Lightning's logged metrics and checkpoints into raynb's
``report`` (``ray.train.lightning.RayTrainReportCallback``)."""
from __future__ import annotations

import os
import shutil
import tempfile

from .. import session as _session
from ..checkpoint import Checkpoint
from ._compat import import_lightning

pl = import_lightning()


def _plain(value):
    item = getattr(value, "item", None)
    return item() if callable(item) else value


class RayTrainReportCallback(pl.callbacks.Callback):
    """At the end of every training epoch, report ``trainer.callback_metrics`` (what
    ``self.log`` logged; plus ``epoch`` and ``step``) with a checkpoint to
    :func:`raynb.train.report`: they reach the pane, ``Result.metrics`` and the run's
    ``checkpoint_000NNN/checkpoint.ckpt``.

    Resume from it with ``trainer.fit(model, ckpt_path=os.path.join(ckpt.path,
    RayTrainReportCallback.CHECKPOINT_NAME))`` where ``ckpt = raynb.train.get_checkpoint()``.

    Every rank must run the callback (it reports on every rank, as ``report`` requires).
    """

    CHECKPOINT_NAME = "checkpoint.ckpt"

    def __init__(self) -> None:
        super().__init__()
        _session._require("RayTrainReportCallback")

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        metrics = {k: _plain(v) for k, v in trainer.callback_metrics.items()}
        metrics["epoch"] = trainer.current_epoch
        metrics["step"] = trainer.global_step
        tmpdir = tempfile.mkdtemp(prefix="lightning-ckpt-")
        try:
            # Collective: rank 0 writes a file; a sharded strategy writes each rank's part.
            trainer.save_checkpoint(os.path.join(tmpdir, self.CHECKPOINT_NAME), weights_only=False)
            checkpoint = Checkpoint.from_directory(tmpdir) if os.listdir(tmpdir) else None
            _session.report(metrics, checkpoint=checkpoint)
            trainer.strategy.barrier("RayTrainReportCallback")  # every rank's copy is staged
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
