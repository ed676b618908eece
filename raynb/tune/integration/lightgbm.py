"""LightGBM callbacks for Tune trials (``ray.tune.integration.lightgbm``).

``lightgbm.train(..., callbacks=[TuneReportCheckpointCallback(...)])`` (or ``lightgbm.cv``)
in a Tune trainable reports each round's eval metrics and checkpoints the booster, as Ray's
callback does; it is raynb's :class:`raynb.train.lightgbm.RayTrainReportCallback` with Ray's
``results_postprocessing_fn``.
"""

from __future__ import annotations

import os
import tempfile
from typing import Callable

from ...train import session as _session
from ...train.checkpoint import Checkpoint
from ...train.lightgbm.callback import CHECKPOINT_NAME, RayTrainReportCallback, flatten_results


class TuneReportCheckpointCallback(RayTrainReportCallback):
    """Report each round's metrics and checkpoint the booster (Ray's class of the same name).

    Args:
        metrics (str | list[str] | dict | None): ``"<data name>-<metric>"`` keys to report
            (``lightgbm.cv``'s: ``"valid-binary_error-mean"``); a dict renames them
            (``{"binary_error": "eval-binary_error"}``); None reports all.
        filename (str): the model file in the checkpoint.
        frequency (int): checkpoint every this many rounds (0: none during training).
        checkpoint_at_end (bool): checkpoint the final booster with the last round's report.
        results_postprocessing_fn (callable | None): ``f(metrics) -> metrics``, applied to
            each report before it is sent.

    Raises:
        ValueError: a bad ``frequency``.
    """

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

    def __call__(self, env) -> None:
        metrics = flatten_results(env.evaluation_result_list or [], self._metrics)
        if self._postprocess is not None:
            metrics = self._postprocess(dict(metrics))
        last = env.iteration == env.end_iteration - 1
        save = (last and self._checkpoint_at_end) or (
            self._frequency and (env.iteration + 1) % self._frequency == 0
        )
        if not save:
            _session.report(metrics)
            return
        with tempfile.TemporaryDirectory(prefix="lightgbm-ckpt-") as tmp:
            env.model.save_model(os.path.join(tmp, self._filename))
            _session.report(metrics, checkpoint=Checkpoint.from_directory(tmp))


__all__ = ["TuneReportCheckpointCallback"]
