"""``ray.air.integrations.keras``: Ray's older home of the Keras callback, the same class as
``raynb.train.tensorflow.keras.ReportCheckpointCallback``. Importing it imports TensorFlow."""

from __future__ import annotations

from ...train.tensorflow.keras import ReportCheckpointCallback

__all__ = ["ReportCheckpointCallback"]
