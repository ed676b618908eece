"""``TensorflowTrainer``: a TensorFlow training function on warm ranks (``ray.train.tensorflow``)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable

from ...cluster.worker import task_context
from ..checkpoint import Checkpoint
from ..config import RunConfig, ScalingConfig
from ..torch import TorchTrainer

KERAS3_FIX = (
    "Keras 3's Model.fit does not run under tf.distribute.MultiWorkerMirroredStrategy (its "
    "PerReplica values). Use tf-keras, which raynb sets up on TensorflowTrainer's ranks "
    "(TF_USE_LEGACY_KERAS=1): build the model with tf.keras (or `import tf_keras as keras`), "
    'not `import keras`; tf-keras comes with `pip install "raynb[tensorflow]"`'
)


class Keras3StrategyError(ValueError):
    """Keras 3's ``Model.fit`` ran under ``MultiWorkerMirroredStrategy`` (names the fix)."""


@dataclass
class TensorflowConfig:
    """TensorFlow's backend settings (``ray.train.tensorflow.TensorflowConfig``): none; raynb
    sets each rank's ``TF_CONFIG`` (its node's IP, a port kept by the warm worker)."""

    def to_dict(self) -> dict:
        return {}


def _raised_in_keras3(exc: BaseException) -> bool:
    """Whether ``exc`` came out of Keras 3 (its ``keras/src`` frames), not tf-keras."""
    marker = f"{os.sep}keras{os.sep}src{os.sep}"
    for e in (exc, exc.__cause__, exc.__context__):
        tb = getattr(e, "__traceback__", None)
        while tb is not None:
            if marker in tb.tb_frame.f_code.co_filename:
                return True
            tb = tb.tb_next
    return "PerReplica" in str(exc)


class _WithTFConfig:
    """The user's function, run with ``TF_CONFIG`` set (what the ranks call)."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "train_loop_per_worker")

    def __call__(self, config):
        from . import cluster_spec

        cluster_spec.setup()
        try:
            return self.fn(config) if task_context.takes_config(self.fn) else self.fn()
        except BaseException as e:
            # A collective that failed or was interrupted leaves TensorFlow's collectives
            # aborted in this process: the next run gets a fresh worker (cluster_spec).
            cluster_spec.mark_aborted()
            if isinstance(e, Exception) and "keras" in sys.modules and _raised_in_keras3(e):
                raise Keras3StrategyError(
                    f"{KERAS3_FIX}. Keras 3 raised {type(e).__name__}: {str(e)[:300]}"
                ) from e
            raise


class TensorflowTrainer(TorchTrainer):
    """TensorFlow on every rank of the run (``ray.train.tensorflow.TensorflowTrainer``).

    Each rank gets ``TF_CONFIG`` (every rank's ``ip:port`` on its node's IP, its own index)
    and ``TF_USE_LEGACY_KERAS=1`` before the function runs, so that
    ``tf.distribute.MultiWorkerMirroredStrategy()`` inside it forms the group and
    ``tf.keras`` is tf-keras, whose ``Model.fit`` runs under that strategy. Report with
    ``raynb.train.report`` or :class:`raynb.train.tensorflow.keras.ReportCheckpointCallback`.

    Warm: a worker keeps TensorFlow imported and its port, so a re-run on the same ranks
    starts without a new process or import. A rank already running TensorFlow for other
    peers (another ``num_workers``) is replaced by a fresh worker before the function runs
    (see :mod:`raynb.train.tensorflow.cluster_spec`).

    Args:
        train_loop_per_worker: ``f()`` or ``f(config)``; import TensorFlow inside it.
        train_loop_config (dict | None): ``f``'s config.
        tensorflow_config (TensorflowConfig | None): Ray's; nothing to set.
        scaling_config, run_config, datasets, resume_from_checkpoint, dataset_config,
            metadata: as ``TorchTrainer``'s.

    Raises:
        ImportError: tensorflow is not installed here (``pip install "raynb[tensorflow]"``).
        TypeError: ``tensorflow_config`` is not a TensorflowConfig (and as ``TorchTrainer``).
    """

    _name_prefix = "TensorflowTrainer"

    def __init__(
        self,
        train_loop_per_worker: Callable,
        *,
        train_loop_config: dict | None = None,
        tensorflow_config: TensorflowConfig | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        datasets: dict | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
        dataset_config=None,
        metadata: dict | None = None,
    ):
        from ._compat import EXTRA_HINT, installed

        if not installed():
            raise ImportError(f"TensorflowTrainer needs tensorflow and tf-keras: {EXTRA_HINT}")
        if tensorflow_config is not None and not isinstance(tensorflow_config, TensorflowConfig):
            raise TypeError(
                f"tensorflow_config must be a TensorflowConfig, got {type(tensorflow_config).__name__}"
            )
        self.tensorflow_config = tensorflow_config or TensorflowConfig()
        inner = getattr(train_loop_per_worker, "__wrapped__", train_loop_per_worker)  # restore()
        fn = (
            train_loop_per_worker
            if isinstance(inner, _WithTFConfig) or not callable(train_loop_per_worker)
            else _WithTFConfig(train_loop_per_worker)
        )
        super().__init__(
            fn,
            train_loop_config=train_loop_config,
            scaling_config=scaling_config,
            run_config=run_config,
            datasets=datasets,
            resume_from_checkpoint=resume_from_checkpoint,
            dataset_config=dataset_config,
            metadata=metadata,
        )


def prepare_dataset_shard(tf_dataset_shard):
    """A ``tf.data.Dataset`` of this rank's shard, ready for ``Model.fit`` under the
    strategy (``ray.train.tensorflow.prepare_dataset_shard``): TensorFlow's auto-sharding
    off (the rows are already this rank's) and prefetching on (autotuned).

    Args:
        tf_dataset_shard (tf.data.Dataset): built from ``get_dataset_shard(name)``'s rows.

    Returns:
        tf.data.Dataset
    """
    from ._compat import import_tensorflow

    tf = import_tensorflow()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return tf_dataset_shard.with_options(options).prefetch(tf.data.AUTOTUNE)
