"""A clear error for ``tf.distribute.MultiWorkerMirroredStrategy()`` inside a raynb function
that is not a ``TensorflowTrainer``'s: without the ``TF_CONFIG`` that trainer sets, each rank
would train alone, silently.

The check is added to TensorFlow's strategy when TensorFlow is imported (an import hook,
installed by ``raynb.train.torch``, which the zygote imports) and acts only inside a
training function with more than one rank. TensorFlow itself is never imported here.
"""

from __future__ import annotations

import functools
import importlib.abc
import sys

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


class _StrategyModuleFinder(importlib.abc.MetaPathFinder):
    """Wraps the strategy right after TensorFlow's module defining it is executed."""

    def find_spec(self, fullname, path, target=None):
        if fullname != STRATEGY_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _WrappingLoader(spec.loader)
                return spec
        return None


class _WrappingLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        if hasattr(module, "CollectiveAllReduceStrategy"):
            wrap_strategy(module.CollectiveAllReduceStrategy)


def install() -> None:
    """Wrap the strategy if TensorFlow is imported already, and when it is later. Idempotent."""
    strategy_cls = getattr(sys.modules.get(STRATEGY_MODULE), "CollectiveAllReduceStrategy", None)
    if strategy_cls is not None:
        wrap_strategy(strategy_cls)
    if not any(isinstance(f, _StrategyModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StrategyModuleFinder())
