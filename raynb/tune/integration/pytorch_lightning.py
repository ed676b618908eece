"""``ray.tune.integration.pytorch_lightning``: Lightning callbacks that report a trial's
logged metrics (and a checkpoint of the ``Trainer``) to Tune, as Ray 2.60's do.
Importing it imports Lightning (``lightning.pytorch``, else ``pytorch_lightning``)."""

from __future__ import annotations

import inspect
import logging
import os
import tempfile
import warnings

try:
    from lightning.pytorch import Callback
except ModuleNotFoundError:  # the older package name
    from pytorch_lightning import Callback

logger = logging.getLogger(__name__)

HOOKS = frozenset(n for n, _ in inspect.getmembers(Callback, inspect.isfunction) if n.startswith("on_"))


def _hook(name: str):
    def hook(self, trainer, *args, **kwargs):
        if name in self._on:
            self._handle(trainer)

    hook.__name__ = name
    return hook


class TuneCallback(Callback):
    """Base of Tune's Lightning callbacks: ``_handle(trainer)`` runs at the hooks ``on``
    names (Lightning's ``on_*`` hooks without ``on_``; default ``"validation_end"``).

    Raises:
        ValueError: a name that is not one of Lightning's callback hooks.
    """

    def __init__(self, on="validation_end"):
        on = on if isinstance(on, list) else [on]
        bad = [h for h in on if f"on_{h}" not in HOOKS]
        if bad:
            raise ValueError(f"Invalid hook selected: {bad[0]}. Must be one of {sorted(HOOKS)} (less 'on_')")
        self._on = {f"on_{h}" for h in on}

    def _handle(self, trainer) -> None:
        raise NotImplementedError


for _name in HOOKS:
    setattr(TuneCallback, _name, _hook(_name))


class TuneReportCheckpointCallback(TuneCallback):
    """Report ``trainer.callback_metrics`` to Tune at ``on``, with a checkpoint of the trainer.

    Args:
        metrics (str | list[str] | dict | None): what to report (a dict maps the reported
            name to Lightning's); None reports every callback metric.
        filename (str): the checkpoint file's name in the checkpoint directory.
        save_checkpoints (bool): False reports the metrics alone.
        on (str | list[str]): hooks (without ``on_``) at which to report.
    """

    def __init__(
        self, metrics=None, filename: str = "checkpoint", save_checkpoints: bool = True, on="validation_end"
    ):
        super().__init__(on=on)
        self._metrics = [metrics] if isinstance(metrics, str) else metrics
        self._filename = filename
        self._save_checkpoints = save_checkpoints

    def _report_dict(self, trainer) -> dict:
        logged = trainer.callback_metrics
        if not self._metrics:
            return {k: v.item() for k, v in logged.items()}
        pairs = self._metrics.items() if isinstance(self._metrics, dict) else ((m, m) for m in self._metrics)
        out = {}
        for name, key in pairs:
            if key in logged:
                out[name] = logged[key].item()
            else:
                logger.warning("Metric %s does not exist in `trainer.callback_metrics`.", key)
        return out

    def _handle(self, trainer) -> None:
        from ...train.checkpoint import Checkpoint
        from ...train.session import report

        if trainer.sanity_checking:
            return
        metrics = self._report_dict(trainer)
        if not metrics:
            return
        if not self._save_checkpoints:
            report(metrics)
            return
        with tempfile.TemporaryDirectory(prefix="ptl_ckpt_") as d:
            trainer.save_checkpoint(os.path.join(d, self._filename))
            report(metrics, checkpoint=Checkpoint.from_directory(d))


class TuneReportCallback(TuneReportCheckpointCallback):
    """Deprecated (as in Ray): ``TuneReportCheckpointCallback(save_checkpoints=False)``."""

    def __init__(self, metrics=None, on="validation_end"):
        warnings.warn(
            "`TuneReportCallback` is deprecated: use `TuneReportCheckpointCallback(save_checkpoints=False)`",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(metrics=metrics, save_checkpoints=False, on=on)


class _TuneCheckpointCallback(TuneCallback):
    def __init__(self, *args, **kwargs):
        raise DeprecationWarning(
            "`ray.tune.integration.pytorch_lightning._TuneCheckpointCallback` is deprecated."
        )


__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]
