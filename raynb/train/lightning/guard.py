"""A clear error for a ``pl.Trainer`` that would launch its own processes inside a raynb
function (``strategy="ddp"``, ``devices=4``): raynb's ranks are the processes already.

Lightning would otherwise start ``devices - 1`` more processes from each rank, or fail
deep inside (``IndexError: list index out of range`` in ``root_device``).
"""
from __future__ import annotations

import functools
import sys

from .. import session as _session

FIX = ('inside a raynb training function use pl.Trainer(devices="auto", strategy=RayDDPStrategy(), '
       'plugins=[RayLightningEnvironment()]) from raynb.train.lightning (or RayFSDPStrategy(), '
       'RayDeepSpeedStrategy()): raynb\'s ranks are the processes, and their group is formed already')


def check_trainer_args(kwargs: dict) -> None:
    """Raise when a Trainer built with ``kwargs`` inside a raynb session would launch
    processes or ignore raynb's group.

    Raises:
        ValueError: ``devices`` other than "auto" / 1, ``num_nodes`` other than 1, or a
            strategy that is not one of raynb's (a plain "auto" is allowed on one rank).
    """
    from .strategies import RAY_STRATEGIES

    world = _session.get_context().get_world_size()
    devices = kwargs.get("devices", "auto")
    if devices not in ("auto", 1, "1", None):
        raise ValueError(f"pl.Trainer(devices={devices!r}) would launch processes of its own; {FIX}")
    if kwargs.get("num_nodes", 1) not in (1, None):
        raise ValueError(f"pl.Trainer(num_nodes={kwargs['num_nodes']!r}): raynb sets the nodes; {FIX}")
    strategy = kwargs.get("strategy", "auto")
    if isinstance(strategy, RAY_STRATEGIES):
        return
    if strategy == "auto" and world == 1:
        return
    name = strategy if isinstance(strategy, str) else type(strategy).__name__
    raise ValueError(f"pl.Trainer(strategy={name!r}) on {world} raynb rank(s) does not train over "
                     f"raynb's ranks; {FIX}")


def _wrap(trainer_cls) -> None:
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


def install_trainer_check() -> None:
    """Check the arguments of every ``Trainer`` of the Lightning packages imported so far
    (``lightning.pytorch``, ``pytorch_lightning``) when built inside a raynb session;
    outside one (the notebook itself) nothing changes. Idempotent."""
    for name in ("lightning.pytorch", "pytorch_lightning"):
        module = sys.modules.get(name)
        trainer_cls = getattr(module, "Trainer", None)
        if trainer_cls is not None:
            _wrap(trainer_cls)
