"""Keras callbacks for TensorFlow's ranks (``ray.train.tensorflow.keras``). Importing this
module imports TensorFlow (tf.keras is tf-keras on a ``TensorflowTrainer``'s ranks)."""

from __future__ import annotations

import os
import tempfile

from .. import session as _session
from ..checkpoint import Checkpoint
from ._compat import import_tensorflow

tf = import_tensorflow()

MODEL_FILENAME = "model.keras"


def _hooks(on) -> list:
    return [on] if isinstance(on, str) else list(on)


class ReportCheckpointCallback(tf.keras.callbacks.Callback):
    """Report Keras's logs and checkpoint the model (Ray's ``ReportCheckpointCallback``).

    Args:
        checkpoint_on (str | list[str]): Keras hooks (without ``on_``) at which to save the
            model (``model.keras``) and report with it; default ``"epoch_end"``.
        report_metrics_on (str | list[str]): hooks at which to report the logs.
        metrics (str | list[str] | dict | None): which logs to report (a dict maps the
            reported name to the Keras name); None reports them all.

    Every rank saves (under the strategy saving may need every replica); rank 0's file
    becomes the checkpoint, the other ranks report the metrics alone.
    """

    def __init__(self, checkpoint_on="epoch_end", report_metrics_on="epoch_end", metrics=None):
        super().__init__()
        self._checkpoint_on = _hooks(checkpoint_on)
        self._report_on = _hooks(report_metrics_on)
        self._metrics = metrics

    def _pick(self, logs: dict) -> dict:
        logs = {k: float(v) if hasattr(v, "__float__") else v for k, v in (logs or {}).items()}
        if self._metrics is None:
            return logs
        if isinstance(self._metrics, str):
            return {self._metrics: logs[self._metrics]}
        if isinstance(self._metrics, dict):
            return {name: logs[key] for name, key in self._metrics.items()}
        return {k: logs[k] for k in self._metrics}

    def _handle(self, logs: dict, when: str) -> None:
        metrics = self._pick(logs)
        if when not in self._checkpoint_on:
            _session.report(metrics)
            return
        with tempfile.TemporaryDirectory(prefix="tf_ckpt_") as d:
            self.model.save(os.path.join(d, MODEL_FILENAME))
            if _session.get_context().get_world_rank() == 0:
                _session.report(metrics, checkpoint=Checkpoint.from_directory(d))
            else:
                _session.report(metrics)

    def _maybe(self, when: str, logs) -> None:
        if when in self._checkpoint_on or when in self._report_on:
            self._handle(logs, when)

    def on_epoch_end(self, epoch, logs=None):
        self._maybe("epoch_end", dict(logs or {}, epoch=epoch))

    def on_train_batch_end(self, batch, logs=None):
        self._maybe("train_batch_end", logs)

    def on_train_end(self, logs=None):
        self._maybe("train_end", logs)

    def on_test_end(self, logs=None):
        self._maybe("test_end", logs)


def load_model(checkpoint: Checkpoint):
    """The Keras model saved by :class:`ReportCheckpointCallback` in ``checkpoint``.

    Raises:
        FileNotFoundError: the checkpoint holds no ``model.keras``.
    """
    path = os.path.join(checkpoint.path, MODEL_FILENAME)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{checkpoint!r} holds no {MODEL_FILENAME}: was it saved by ReportCheckpointCallback?"
        )
    return tf.keras.models.load_model(path)


__all__ = ["ReportCheckpointCallback", "load_model"]
