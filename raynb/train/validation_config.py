"""Ray Train 2.60's validation settings: ``ValidationFn``, ``ValidationTaskConfig``,
``ValidationConfig`` (``report(..., validation=...)``).

In Ray, ``ValidationConfig(fn)`` given to the trainer makes each ``report(checkpoint=...,
validation=True | ValidationTaskConfig(...))`` start ``fn(checkpoint, **fn_kwargs)`` as a
separate Ray task while training goes on; the dict it returns is merged into that
checkpoint's metrics (``get_all_reported_checkpoints``, ``Result.best_checkpoints``).
raynb has no process beside the ranks to run it in, so ``report(validation=...)`` raises
and names what to do instead (``report_options.take_ray_keywords``); these classes are
served so that such code imports, and check their arguments as Ray does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class ValidationFn(Protocol):
    """A function that validates a checkpoint: ``fn(checkpoint, **kwargs) -> dict`` of metrics."""

    def __call__(self, checkpoint, **kwargs: Any) -> dict: ...


@dataclass
class ValidationTaskConfig:
    """One validation task's settings, passed to ``report(validation=...)``.

    Args:
        fn_kwargs (dict | None): keyword arguments for the validation function (the
            checkpoint is always its first argument); they override the trainer's defaults.
        timeout_s (float | None): seconds the task may take; None: no limit.

    Raises:
        ValueError: ``timeout_s`` is not None and not > 0; ``fn_kwargs`` is not a dict.
    """

    fn_kwargs: dict | None = None
    timeout_s: float | None = None

    def __post_init__(self):
        if self.fn_kwargs is None:
            self.fn_kwargs = {}
        if not isinstance(self.fn_kwargs, dict):
            raise ValueError(
                f"ValidationTaskConfig(fn_kwargs=...) takes a dict of keyword arguments, got "
                f"{type(self.fn_kwargs).__name__}"
            )
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(
                f"ValidationTaskConfig(timeout_s={self.timeout_s!r}): give None (no limit) or seconds > 0"
            )


class ValidationConfig:
    """Validation for a trainer (Ray's ``ValidationConfig``).

    Args:
        fn (ValidationFn): ``fn(checkpoint, **kwargs) -> dict``.
        task_config (ValidationTaskConfig | None): default task settings.
        ray_remote_kwargs (dict | None): Ray's ``ray.remote()`` options for the task.

    Raises:
        TypeError: ``fn`` is not callable, or ``task_config`` is not a ValidationTaskConfig.
    """

    def __init__(
        self, fn, task_config: ValidationTaskConfig | None = None, ray_remote_kwargs: dict | None = None
    ):
        if not callable(fn):
            raise TypeError(
                f"ValidationConfig(fn=...) takes a function fn(checkpoint, **kwargs), got {fn!r:.80}"
            )
        if task_config is not None and not isinstance(task_config, ValidationTaskConfig):
            raise TypeError(
                "ValidationConfig(task_config=...) takes a ValidationTaskConfig, "
                f"got {type(task_config).__name__}"
            )
        self.fn = fn
        self.task_config = task_config or ValidationTaskConfig()
        self.ray_remote_kwargs = dict(ray_remote_kwargs or {})
