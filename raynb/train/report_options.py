"""Ray 2.60's ``train.report`` keywords beyond metrics and checkpoint
(``checkpoint_dir_name``, ``checkpoint_upload_mode``, ``delete_local_checkpoint_after_upload``,
``checkpoint_upload_fn``, ``validation``) and ``CheckpointUploadMode``, as raynb reads them.

raynb copies a reported checkpoint's files into the run directory before ``report``
returns, under its own name (``checkpoint_000NNN``), so every upload mode ends the same:
a durable checkpoint. Those keywords are accepted (said once); a custom upload function
or a validation task is refused, naming what to do instead.
"""

from __future__ import annotations

import enum

from ..client.no_effect import accepted_no_effect


class CheckpointUploadMode(enum.Enum):
    """How Ray uploads a reported checkpoint: ``SYNC`` (before ``report`` returns),
    ``ASYNC`` (in the background), ``NO_UPLOAD`` (already at its destination). On raynb
    each is a copy into the run directory before ``report`` returns."""

    SYNC = "SYNC"
    ASYNC = "ASYNC"
    NO_UPLOAD = "NO_UPLOAD"


class CheckpointConsistencyMode(enum.Enum):
    """What ``get_all_reported_checkpoints`` waits for (Ray's): ``COMMITTED`` (the latest
    report's checkpoint saved) or ``VALIDATED`` (also validated). raynb runs no validation
    tasks, so both wait for the same: every reported checkpoint committed."""

    COMMITTED = "COMMITTED"
    VALIDATED = "VALIDATED"


RAY_KEYWORDS = (
    "checkpoint_dir_name",
    "checkpoint_upload_mode",
    "delete_local_checkpoint_after_upload",
    "checkpoint_upload_fn",
    "validation",
)


def take_ray_keywords(more: dict, has_checkpoint: bool = True) -> dict:
    """Take Ray's report keywords out of ``more`` (the rest are metrics, Ray's older
    ``report(loss=...)`` form) and check them; ``has_checkpoint``: the report carries one.

    Raises:
        ValueError: a true ``validation`` without a checkpoint (as Ray's).
        NotImplementedError: ``checkpoint_upload_fn`` or a true ``validation``.
    """
    ray_args = {k: more.pop(k) for k in RAY_KEYWORDS if k in more}
    if ray_args.get("validation") and not has_checkpoint:
        raise ValueError("report(validation=...) validates a checkpoint: pass checkpoint= with it")
    if ray_args.get("checkpoint_upload_fn") is not None:
        raise NotImplementedError(
            "report(checkpoint_upload_fn=...) is not served by raynb: report the checkpoint "
            "directory and raynb copies it into the run directory (storage_path)"
        )
    if ray_args.get("validation"):
        raise NotImplementedError(
            "report(validation=...) is not served by raynb: Ray runs ValidationConfig's fn on the "
            "checkpoint as a separate task while training goes on, and raynb has no process beside "
            "the ranks to run it in. Call the function yourself on rank 0 (metrics = fn(checkpoint, "
            "**kwargs)) and report its metrics with the checkpoint, or validate Result.best_checkpoints "
            "after fit()"
        )
    if any(v is not None for k, v in ray_args.items() if k != "validation"):
        accepted_no_effect(
            "report(checkpoint_dir_name=, checkpoint_upload_mode=, delete_local_checkpoint_after_upload=)",
            "raynb copies each reported checkpoint into the run directory as checkpoint_000NNN "
            "before report returns",
        )
    return ray_args
