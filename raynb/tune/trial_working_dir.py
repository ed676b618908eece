"""A trial's function runs in its trial directory, as Ray Tune's does.

Ray Tune changes each trial's working directory to a directory of the trial's own
(``RAY_CHDIR_TO_TRIAL_DIR``, default ``1``; ``ray.tune.Trainable.setup_logdir``) and keeps
the driver's in ``$TUNE_ORIG_WORKING_DIR``. Concurrent trials that write the same relative
path (``os.makedirs("my_model")`` and a checkpoint made from it, as Ray's examples do) then
never overwrite each other's files. The driver's directory stays first on the ranks' import
path, so a module beside the notebook or script still imports.
"""

from __future__ import annotations

import os

ORIG_DIR_ENV = "TUNE_ORIG_WORKING_DIR"
CHDIR_ENV = "RAY_CHDIR_TO_TRIAL_DIR"


def chdir_enabled() -> bool:
    """False when ``$RAY_CHDIR_TO_TRIAL_DIR`` is ``0`` (Ray's opt-out), else True."""
    return os.environ.get(CHDIR_ENV, "1").strip() != "0"


def in_trial_dir(spec: dict, trial_dir: str) -> None:
    """Point a trial's run submission ``spec`` at ``trial_dir`` (made here when missing) as
    its ranks' working directory; ``$TUNE_ORIG_WORKING_DIR`` on the ranks names the driver's.
    Nothing changes when the opt-out is set. A rank whose node cannot see ``trial_dir``
    (another machine without the shared storage) keeps the working directory it had."""
    if not chdir_enabled() or "://" in trial_dir:
        return
    orig = spec.get("cwd") or os.getcwd()
    try:
        os.makedirs(trial_dir, mode=0o700, exist_ok=True)
    except OSError:
        return  # not a local path: the ranks keep the driver's directory
    spec["env"] = {**(spec.get("env") or {}), ORIG_DIR_ENV: orig}
    spec["sys_path"] = [orig] + [p for p in spec.get("sys_path") or () if p != orig]
    spec["cwd"] = trial_dir
