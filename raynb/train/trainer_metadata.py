"""The trainer's ``metadata=`` on the ranks: ``get_context().get_metadata()``.

``TorchTrainer(metadata={...})`` (and the trainers built on it) ship the dict with the
training function, wrapped in :class:`WithMetadata`; on a rank the wrapper makes it known to
``TrainContext.get_metadata`` for the call.
"""

from __future__ import annotations

import json

from ..cluster.worker import task_context
from ..cluster.worker.remote_error import hide_from_tracebacks

STATE_KEY = "trainer_metadata"


def check_metadata(metadata) -> dict | None:
    """``metadata=`` as Ray takes it: None, or a dict that JSON can hold.

    Raises:
        TypeError: not a dict, or a value JSON cannot encode (named)."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise TypeError(f"metadata must be a dict of JSON values, got {type(metadata).__name__}")
    try:
        json.dumps(metadata)
    except (TypeError, ValueError) as e:
        raise TypeError(f"metadata must hold JSON values (strings, numbers, lists, dicts): {e}") from None
    return metadata


class WithMetadata:
    """The training function with the trainer's metadata. ``__wrapped__`` gives the worker
    ``fn``'s signature."""

    def __init__(self, fn, metadata: dict):
        self.__wrapped__ = fn
        self.metadata = metadata

    @hide_from_tracebacks  # the rank's traceback starts at the user's code
    def __call__(self, *args):
        task_context.state()[STATE_KEY] = self.metadata
        return self.__wrapped__(*args)


def with_metadata(fn, metadata: dict | None):
    """``fn`` wrapped with ``metadata`` (``fn`` itself when there is none)."""
    return WithMetadata(fn, metadata) if metadata else fn


def current_metadata() -> dict:
    """This rank's trainer metadata ({} when the trainer was given none)."""
    return dict(task_context.state().get(STATE_KEY) or {})
