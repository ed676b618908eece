"""``ray.air.session``: the session functions older scripts call inside a training function
(``session.report(...)``, ``session.get_world_rank()``); each is raynb.train's.

Raises (every function): RuntimeError outside a training function.
"""

from ..train.datasets import get_dataset_shard
from ..train.session import get_checkpoint, get_context, report


def get_world_rank() -> int:
    return get_context().get_world_rank()


def get_world_size() -> int:
    return get_context().get_world_size()


def get_local_rank() -> int:
    return get_context().get_local_rank()


def get_local_world_size() -> int:
    return get_context().get_local_world_size()


def get_node_rank() -> int:
    return get_context().get_node_rank()


def get_trial_name() -> str:
    return get_context().get_trial_name()


def get_trial_dir() -> str:
    return get_context().get_trial_dir()


def get_experiment_name() -> str:
    return get_context().get_experiment_name()


__all__ = [
    "report",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "get_world_rank",
    "get_world_size",
    "get_local_rank",
    "get_local_world_size",
    "get_node_rank",
    "get_trial_name",
    "get_trial_dir",
    "get_experiment_name",
]
