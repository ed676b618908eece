"""A clear error for a ``pl.Trainer`` that would launch its own processes inside a raynb
function (``strategy="ddp"``, ``devices=4``): raynb's ranks are the processes already.

Lightning would otherwise start ``devices - 1`` more processes from each rank, or fail
deep inside (``IndexError: list index out of range`` in ``root_device``). The check is
added to Lightning's ``Trainer`` when Lightning is imported (an import hook, installed by
``raynb.train.torch``, so also for a function that never imports ``raynb.train.lightning``)
and acts only inside a training function. Lightning itself is never imported here.
"""

from __future__ import annotations

import functools

from . import library_imports
from . import session as _session

FIX = (
    'inside a raynb training function use pl.Trainer(devices="auto", strategy=RayDDPStrategy(), '
    "plugins=[RayLightningEnvironment()]) from raynb.train.lightning (or RayFSDPStrategy(), "
    "RayDeepSpeedStrategy()): raynb's ranks are the processes, and their group is formed already"
)
TRAINER_MODULES = ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer")


def _is_ray_strategy(strategy) -> bool:
    return any(c.__module__.startswith("raynb.train.lightning") for c in type(strategy).__mro__)


def check_trainer_args(kwargs: dict) -> None:
    """Raise when a Trainer built with ``kwargs`` inside a raynb session would launch
    processes or ignore raynb's group.

    Raises:
        ValueError: ``devices`` other than "auto" / 1, ``num_nodes`` other than 1, or a
            strategy that is not one of raynb's (a plain "auto" is allowed on one rank).
    """
    world = _session.get_context().get_world_size()
    devices = kwargs.get("devices", "auto")
    if devices not in ("auto", 1, "1", None):
        raise ValueError(f"pl.Trainer(devices={devices!r}) would launch processes of its own; {FIX}")
    if kwargs.get("num_nodes", 1) not in (1, None):
        raise ValueError(f"pl.Trainer(num_nodes={kwargs['num_nodes']!r}): raynb sets the nodes; {FIX}")
    strategy = kwargs.get("strategy", "auto")
    if _is_ray_strategy(strategy) or (strategy == "auto" and world == 1):
        return
    name = strategy if isinstance(strategy, str) else type(strategy).__name__
    raise ValueError(
        f"pl.Trainer(strategy={name!r}) on {world} raynb rank(s) does not train over raynb's ranks; {FIX}"
    )


def wrap_trainer(trainer_cls) -> None:
    """Check ``trainer_cls``'s arguments when one is built inside a raynb session. Idempotent."""
    original = trainer_cls.__init__
    if getattr(original, "_raynb_checked", False):
        return

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        if _session.in_session():
            check_trainer_args(kwargs)
        original(self, *args, **kwargs)

    __init__._raynb_checked = True
    trainer_cls.__init__ = __init__


def _wrap_module_trainer(module) -> None:
    if hasattr(module, "Trainer"):
        wrap_trainer(module.Trainer)


def install() -> None:
    """Wrap the Trainers imported already, and any imported later. Idempotent."""
    for name in TRAINER_MODULES:
        library_imports.when_imported(name, _wrap_module_trainer)
