"""TensorFlow on the warm pool (``ray.train.tensorflow``): :class:`TensorflowTrainer` sets
each rank's ``TF_CONFIG`` so ``tf.distribute.MultiWorkerMirroredStrategy()`` forms the
group, with tf.keras as tf-keras; :func:`prepare_dataset_shard`;
``raynb.train.tensorflow.keras.ReportCheckpointCallback``.

Importing this package does not import TensorFlow (the zygote that forks the workers never
does); building a ``TensorflowTrainer`` without it raises an ImportError naming the extra
(``pip install "raynb[tensorflow]"``).
"""

from ..framework_checkpoints import TensorflowCheckpoint
from .trainer import Keras3StrategyError, TensorflowConfig, TensorflowTrainer, prepare_dataset_shard

__all__ = [
    "Keras3StrategyError",
    "TensorflowCheckpoint",
    "TensorflowConfig",
    "TensorflowTrainer",
    "prepare_dataset_shard",
]
