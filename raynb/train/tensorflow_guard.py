"""A clear error for ``tf.distribute.MultiWorkerMirroredStrategy()`` inside a raynb function
that is not a ``TensorflowTrainer``'s: without the ``TF_CONFIG`` that trainer sets, each rank
would train alone, silently.

The check is added to TensorFlow's strategy when TensorFlow is imported (an import hook,
installed by ``raynb.train.torch``, which the zygote imports) and acts only inside a
training function with more than one rank. TensorFlow itself is never imported here.
"""

from __future__ import annotations

import functools

from . import library_imports
from . import session as _session

STRATEGY_MODULE = "tensorflow.python.distribute.collective_all_reduce_strategy"
# Set in a task's state by raynb.train.tensorflow.cluster_spec.setup().
TF_TASK_KEY = "tensorflow_cluster"


def check_strategy() -> None:
    """Raise when a multi-worker strategy is built on a rank that has no TensorFlow cluster.

    Raises:
        RuntimeError: inside a ``TorchTrainer`` (or other non-TensorFlow) function of more
            than one rank; names ``TensorflowTrainer``.
    """
    from ..cluster.worker import task_context

    task = task_context.current()
    if task is None or task.get("world_size", 1) < 2 or task_context.state().get(TF_TASK_KEY):
        return
    raise RuntimeError(
        "tf.distribute.MultiWorkerMirroredStrategy() in a TorchTrainer function has no TF_CONFIG: "
        "each rank would train alone. Run the function with "
        "raynb.train.tensorflow.TensorflowTrainer, which sets every rank's TF_CONFIG"
    )


def wrap_strategy(strategy_cls) -> None:
    """Check before ``strategy_cls`` is built inside a raynb session. Idempotent."""
    original = strategy_cls.__init__
    if getattr(original, "_raynb_checked", False):
        return

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        if _session.in_session():
            check_strategy()
        original(self, *args, **kwargs)

    __init__._raynb_checked = True
    strategy_cls.__init__ = __init__


def _wrap_module_strategy(module) -> None:
    if hasattr(module, "CollectiveAllReduceStrategy"):
        wrap_strategy(module.CollectiveAllReduceStrategy)


def install() -> None:
    """Wrap the strategy if TensorFlow is imported already, and when it is later. Idempotent."""
    library_imports.when_imported(STRATEGY_MODULE, _wrap_module_strategy)
