"""Import TensorFlow on a rank (tf.keras as tf-keras), or say which extra installs it."""

from __future__ import annotations

import os

EXTRA_HINT = 'pip install "raynb[tensorflow]"'


def import_tensorflow():
    """The ``tensorflow`` module, with ``tf.keras`` being tf-keras (Keras 2) when this call
    is the process's first import of TensorFlow: Keras 3's ``Model.fit`` does not run under
    ``MultiWorkerMirroredStrategy``.

    Raises:
        ImportError: tensorflow (or tf-keras) is not installed; names the extra.
    """
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    try:
        import tensorflow
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] not in ("tensorflow", "tf_keras"):
            raise
        raise ImportError(
            f"raynb.train.tensorflow needs tensorflow and tf-keras, which are not installed: {EXTRA_HINT}"
        ) from None
    return tensorflow


def installed() -> bool:
    """Whether tensorflow is installed (without importing it: that takes seconds)."""
    import importlib.util

    return importlib.util.find_spec("tensorflow") is not None
