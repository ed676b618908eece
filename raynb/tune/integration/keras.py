"""``ray.tune.integration.keras``: the Keras callback for a Tune trial (Ray 2.60's module).
Importing it imports TensorFlow.

``TuneReportCheckpointCallback`` reports Keras's logs (and checkpoints the model) from a
trainable's ``model.fit``, as ``raynb.train.tensorflow.keras.ReportCheckpointCallback`` does;
``TuneReportCallback`` and ``_TuneCheckpointCallback`` raise ``DeprecationWarning`` as Ray's do.
"""

from __future__ import annotations

from ...train.tensorflow.keras import ReportCheckpointCallback

_DEPRECATION_MESSAGE = (
    "The `ray.tune.integration.keras` module is deprecated in favor of "
    "`ray.train.tensorflow.keras.ReportCheckpointCallback`."
)


class TuneReportCallback:
    """Deprecated (as in Ray): use ``TuneReportCheckpointCallback`` or
    ``raynb.train.tensorflow.keras.ReportCheckpointCallback``.

    Raises:
        DeprecationWarning: always.
    """

    def __new__(cls, *args, **kwargs):
        raise DeprecationWarning(_DEPRECATION_MESSAGE)


class _TuneCheckpointCallback(TuneReportCallback):
    pass


class TuneReportCheckpointCallback(ReportCheckpointCallback):
    """Report Keras's logs from a Tune trial, with a checkpoint where ``checkpoint_on`` says.

    Args:
        metrics (str | list[str] | dict | None): which logs to report (a dict maps the
            reported name to the Keras name); None reports them all.
        report_metrics_on (str | list[str]): Keras hooks (without ``on_``) at which to
            report; default ``"epoch_end"``.
        checkpoint_on (str | list[str]): hooks at which to save the model with the report;
            ``[]`` never saves.
    """

    def __init__(self, metrics=None, report_metrics_on="epoch_end", checkpoint_on="epoch_end"):
        super().__init__(checkpoint_on=checkpoint_on, report_metrics_on=report_metrics_on, metrics=metrics)


__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]
