"""XGBoost callbacks for Tune trials (``ray.tune.integration.xgboost``).

``xgboost.train(..., callbacks=[TuneReportCheckpointCallback(...)])`` in a Tune trainable
reports each round's eval metrics (one report per round: ``training_iteration`` equals the
rounds boosted) and checkpoints the booster, as Ray's callback does; it is raynb's
:class:`raynb.train.xgboost.RayTrainReportCallback` with Ray's ``results_postprocessing_fn``.
"""

from __future__ import annotations

from typing import Callable

from ...train.xgboost.callback import CHECKPOINT_NAME, RayTrainReportCallback


class TuneReportCheckpointCallback(RayTrainReportCallback):
    """Report each round's metrics and checkpoint the booster (Ray's class of the same name).

    Args:
        metrics (str | list[str] | dict | None): ``"<eval name>-<metric>"`` keys to report
            (a dict renames them: ``{"loss": "eval-logloss"}``); None reports all.
        filename (str): the model file in the checkpoint (``.ubj`` or ``.json``).
        frequency (int): checkpoint every this many rounds (0: none during training).
        checkpoint_at_end (bool): checkpoint the final booster with the last round's report.
        results_postprocessing_fn (callable | None): ``f(metrics) -> metrics``, applied to
            each report before it is sent (e.g. averaging ``xgboost.cv``'s folds).

    Raises:
        ValueError: a bad ``frequency`` or ``filename``.
    """

    CHECKPOINT_NAME = CHECKPOINT_NAME

    def __init__(
        self,
        metrics=None,
        filename: str = CHECKPOINT_NAME,
        frequency: int = 0,
        checkpoint_at_end: bool = True,
        results_postprocessing_fn: Callable | None = None,
    ):
        super().__init__(
            metrics=metrics, filename=filename, frequency=frequency, checkpoint_at_end=checkpoint_at_end
        )
        self._postprocess = results_postprocessing_fn

    def _report(self, model, epoch: int, metrics: dict, checkpoint: bool) -> None:
        if self._postprocess is not None:
            metrics = self._postprocess(dict(metrics))
        super()._report(model, epoch, metrics, checkpoint)


class TuneReportCallback(TuneReportCheckpointCallback):
    """Report each round's metrics, without checkpoints (the pre-2.11 Ray callback; Ray 2.60
    refuses it in favour of ``TuneReportCheckpointCallback(frequency=0, checkpoint_at_end=False)``,
    which this is)."""

    def __init__(self, metrics=None, results_postprocessing_fn: Callable | None = None):
        super().__init__(
            metrics=metrics,
            frequency=0,
            checkpoint_at_end=False,
            results_postprocessing_fn=results_postprocessing_fn,
        )


__all__ = ["TuneReportCheckpointCallback", "TuneReportCallback"]
