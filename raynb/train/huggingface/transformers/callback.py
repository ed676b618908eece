"""``RayTrainReportCallback``: a Transformers Trainer's saves and logs into raynb's ``report``."""

from __future__ import annotations

import os
import shutil
import tempfile

from ... import session as _session
from ...checkpoint import Checkpoint
from ._compat import import_transformers

transformers = import_transformers()


class RayTrainReportCallback(transformers.trainer_callback.TrainerCallback):
    """After each save of the Trainer (``save_strategy``), report the metrics logged so
    far (``state.log_history``, merged, the latest winning) with a checkpoint holding the
    Trainer's last ``checkpoint-N`` directory as ``checkpoint/``
    (``ray.train.huggingface.transformers.RayTrainReportCallback``).

    Resume with ``trainer.train(resume_from_checkpoint=os.path.join(ckpt.path,
    RayTrainReportCallback.CHECKPOINT_NAME))`` where ``ckpt = raynb.train.get_checkpoint()``.

    Set ``logging_steps`` / ``eval_strategy`` so the metrics you rank checkpoints by are
    logged before each save (e.g. ``eval_strategy == save_strategy == "epoch"``).
    """

    CHECKPOINT_NAME = "checkpoint"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _session._require("RayTrainReportCallback")

    def on_save(self, args, state, control, **kwargs):
        metrics = {}
        for entry in state.log_history:
            metrics.update(entry)
        metrics = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        metrics.setdefault("step", state.global_step)
        metrics["epoch"] = state.epoch if state.epoch is not None else 0
        tmpdir = tempfile.mkdtemp(prefix="hf-ckpt-")
        try:
            source = (
                transformers.trainer_utils.get_last_checkpoint(args.output_dir)
                if os.path.isdir(args.output_dir)
                else None
            )
            checkpoint = None
            # Only the process that wrote it (``should_save``: world rank 0 by default) copies
            # it: another rank would read the directory while rank 0 still writes into it. The
            # other ranks report the same step without a checkpoint, as XGBoost's callback does.
            if source is not None and args.should_save:
                shutil.copytree(source, os.path.join(tmpdir, self.CHECKPOINT_NAME))
                checkpoint = Checkpoint.from_directory(tmpdir)
            _session.report(metrics, checkpoint=checkpoint)
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
