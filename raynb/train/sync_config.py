"""``SyncConfig`` (``ray.train.SyncConfig`` / ``ray.tune.SyncConfig``): accepted with no effect.

Ray syncs trial directories from its nodes to the storage path; raynb's head writes every
run directory on its own file system (or uploads checkpoints to an object store) directly,
so there is nothing to sync.
"""

from __future__ import annotations

from ..client.no_effect import accepted_no_effect


class SyncConfig:
    """Ray's sync settings (``sync_period``, ``sync_timeout``, ``sync_artifacts``, ...): kept
    as attributes, with no effect here (one line says so)."""

    def __init__(self, **settings):
        accepted_no_effect(
            "SyncConfig(...)",
            "run directories are written on the head's file system directly; there is nothing to sync",
        )
        self.__dict__.update(settings)

    def __repr__(self) -> str:
        return f"SyncConfig({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"
