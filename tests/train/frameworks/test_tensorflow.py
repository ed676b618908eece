"""TensorflowTrainer on the real warm cluster: two ranks train a tf-keras model with
Model.fit under MultiWorkerMirroredStrategy and end with identical weights, a warm re-fit
(TensorFlow kept imported, TF_CONFIG unchanged) is much faster than the first, a torch run
on the same workers still works, Keras 3's fit names the fix, and a rank set up for another
cluster is replaced by a fresh worker without failing the run."""

from __future__ import annotations

import statistics
import sys
import time

import cloudpickle
import pytest

pytest.importorskip("tensorflow")

from raynb.errors import RunError  # noqa: E402
from raynb.train import RunConfig, ScalingConfig  # noqa: E402
from raynb.train.tensorflow import TensorflowTrainer  # noqa: E402
from raynb.train.torch import TorchTrainer  # noqa: E402

pytestmark = pytest.mark.tensorflow
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _gather_weights(model):
    """Every rank's flat weights, over the run's torch group (rank order)."""
    import numpy as np
    import torch
    import torch.distributed as dist

    flat = torch.from_numpy(np.concatenate([w.ravel() for w in model.get_weights()]).astype("float64"))
    every = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(every, flat)
    return [t.tolist() for t in every]


def _gather_pids() -> list:
    import os

    import torch
    import torch.distributed as dist

    every = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(every, torch.tensor([os.getpid()]))
    return [int(t.item()) for t in every]


_TF_PIDS: list = []  # the workers the first test's fits ran TensorFlow in


def _keras_fit(config):
    import os

    tf_was_loaded = "tensorflow" in sys.modules  # a warm rank imported it in an earlier run
    import numpy as np
    import tensorflow as tf

    from raynb.train import get_context
    from raynb.train.tensorflow import prepare_dataset_shard
    from raynb.train.tensorflow.keras import ReportCheckpointCallback

    ctx = get_context()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential(
            [tf.keras.layers.Dense(16, activation="relu", input_shape=(4,)), tf.keras.layers.Dense(1)]
        )
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    shard = tf.data.Dataset.from_tensor_slices((x[rank::world], y[rank::world])).batch(16)
    model.fit(
        prepare_dataset_shard(shard),
        epochs=config.get("epochs", 3),
        verbose=0,
        callbacks=[ReportCheckpointCallback()],
    )
    return {
        "weights": _gather_weights(model),
        "keras": tf.keras.__name__,
        "tf_was_loaded": tf_was_loaded,
        "pid": os.getpid(),
        "pids": _gather_pids(),
    }


def _fit(tmp_path, fn=_keras_fit, workers=2, **config):
    return TensorflowTrainer(
        fn,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
    )


def _value(trainer):
    """(Result, rank 0's return value) of a fit."""
    from raynb.train.datasets import with_datasets
    from raynb.train.fit_run import execute_run

    return execute_run(
        with_datasets(trainer.train_loop_per_worker, trainer.datasets),
        trainer.train_loop_config,
        trainer.scaling_config,
        trainer.run_config,
        name_prefix="TensorflowTrainer",
    )


def test_two_ranks_fit_identical_weights_and_a_warm_refit_is_much_faster(warm, tmp_path):
    t0 = time.perf_counter()
    result, value = _value(_fit(tmp_path / "first"))
    first = time.perf_counter() - t0
    assert value["keras"].startswith("tf_keras"), value["keras"]
    _TF_PIDS[:] = value["pids"]
    w0, w1 = value["weights"]
    assert max(abs(a - b) for a, b in zip(w0, w1)) < 1e-6
    df = result.metrics_dataframe
    assert list(df["epoch"]) == [0, 1, 2]
    assert df["loss"].iloc[-1] < df["loss"].iloc[0]
    from raynb.train.tensorflow.keras import load_model

    assert load_model(result.checkpoint).count_params() == 4 * 16 + 16 + 16 + 1
    warm_s = []
    for i in range(2):
        t0 = time.perf_counter()
        again, warm_value = _value(_fit(tmp_path / f"warm{i}"))
        warm_s.append(time.perf_counter() - t0)
        assert len(again.metrics_dataframe) == 3
        # The same process, TensorFlow already imported: no fresh worker, no import.
        assert warm_value["tf_was_loaded"] and warm_value["pid"] == value["pid"], warm_value
    # TensorFlow's import is paid by the TensorFlow zygote (once, at the first fit that needs
    # its workers, or before this test), not by the ranks: the re-fit saves less than it did.
    assert statistics.median(warm_s) < first, (first, warm_s)


def _torch_all_reduce():
    import torch
    import torch.distributed as dist

    t = torch.ones(3)
    dist.all_reduce(t)
    return {"sum": t.tolist(), "tf_loaded": "tensorflow" in sys.modules}


def test_a_torch_run_after_tensorflow_still_works(warm, tmp_path):
    result = TorchTrainer(
        _torch_all_reduce,
        scaling_config=ScalingConfig(num_workers=4),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
    ).fit()
    assert result.error is None


def _strategy_in_torch():
    import tensorflow as tf

    tf.distribute.MultiWorkerMirroredStrategy()


def test_a_strategy_in_a_torch_function_names_tensorflow_trainer(warm, tmp_path):
    with pytest.raises(RunError, match="TensorflowTrainer, which sets every rank's TF_CONFIG"):
        TorchTrainer(
            _strategy_in_torch,
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
        ).fit()


def _fit_killed_once(config):
    import os
    import signal

    import numpy as np
    import tensorflow as tf

    from raynb.train import get_checkpoint, get_context
    from raynb.train.tensorflow import prepare_dataset_shard
    from raynb.train.tensorflow.keras import ReportCheckpointCallback, load_model

    rank, world = get_context().get_world_rank(), get_context().get_world_size()
    ckpt, steps = get_checkpoint(), 128 // world // 16
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        if ckpt is not None:
            model = load_model(ckpt)  # compiled, with its optimizer's step count
        else:
            model = tf.keras.Sequential(
                [tf.keras.layers.Dense(8, input_shape=(4,)), tf.keras.layers.Dense(1)]
            )
            model.compile(optimizer="sgd", loss="mse")
    done = int(model.optimizer.iterations.numpy()) // steps

    class Preempt(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if ckpt is None and rank == 1 and self.epoch == 1 and batch == 1:
                os.kill(os.getpid(), signal.SIGKILL)  # mid-epoch, as a preemption would

    x = np.random.default_rng(0).normal(size=(128, 4)).astype("float32")
    shard = tf.data.Dataset.from_tensor_slices((x[rank::world], x[rank::world, :1])).batch(16)
    model.fit(
        prepare_dataset_shard(shard),
        initial_epoch=done,
        epochs=4,
        verbose=0,
        callbacks=[ReportCheckpointCallback(), Preempt()],
    )


def test_a_rank_killed_mid_epoch_restarts_from_the_checkpoint(warm, tmp_path):
    from raynb.train import FailureConfig

    result = TensorflowTrainer(
        _fit_killed_once,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            verbose=0, storage_path=str(tmp_path), failure_config=FailureConfig(max_failures=1)
        ),
    ).fit()
    assert result.error is None
    epochs = list(result.metrics_dataframe["epoch"])
    # Epoch 0 once (checkpointed before the kill), then on from epoch 1, not from scratch.
    assert epochs.count(0) == 1 and epochs[-3:] == [1, 2, 3], epochs


def _keras3_fit():
    import keras  # Keras 3, not tf.keras (tf-keras)
    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    x = np.ones((32, 4), "float32")
    model.fit(tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(8), epochs=1, verbose=0)


def test_keras3_fit_under_the_strategy_names_the_fix(warm, tmp_path):
    with pytest.raises(RunError) as e:
        _fit(tmp_path, fn=_keras3_fit).fit()
    text = str(e.value)
    assert "TF_USE_LEGACY_KERAS=1" in text and "tf.keras" in text, text
    assert text.index("TF_USE_LEGACY_KERAS=1") < text.index("Keras 3 raised")


def _pid_and_spec():
    import json
    import os

    import tensorflow as tf

    tf.distribute.MultiWorkerMirroredStrategy()
    return {"pid": os.getpid(), "cluster": json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]}


def test_a_rank_set_up_for_another_cluster_is_replaced_not_failed(warm, tmp_path):
    # Two workers already run TensorFlow for a 2-rank cluster (the tests above); three
    # ranks take at least one of them, which cannot join: it is replaced, the run passes.
    result, value = _value(_fit(tmp_path, fn=_pid_and_spec, workers=3))
    assert result.error is None
    assert len(value["cluster"]) == 3 and len(set(value["cluster"])) == 3
    assert all(a.startswith("127.0.0.1:") for a in value["cluster"])
    import psutil

    # At least one of them was placed among the 3 ranks (of the 4 idle workers): killed.
    assert _TF_PIDS and not all(psutil.pid_exists(p) for p in _TF_PIDS), _TF_PIDS
