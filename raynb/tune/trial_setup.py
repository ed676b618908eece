"""What a trial is made of besides its config: the trainable and its scaling
(:class:`TrialSetup`), and its run directory (the params it ran with, and a
checkpoint adopted from another trial by PBT's exploit)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from ..cluster.storage.rundir import STATE_FILE as RUN_STATE_FILE
from ..cluster.storage.rundir import read_run_dir, write_json_atomic
from ..train.config import RunConfig, ScalingConfig


class TrialSetup:
    """Everything one ``fit()`` needs to run trials: the function, how many workers each
    trial takes, and how a trial's config becomes the function's config."""

    def __init__(
        self,
        fn,
        scaling_config: ScalingConfig,
        base_config: dict | None,
        nested_key: str | None,
        run_config: RunConfig,
        name_prefix: str,
    ):
        from ..train.profiling import Profiled, profile_options

        # RunConfig(profile=...) profiles every trial's ranks: each trial's run directory
        # gets its profile/ (its Result.profile reads it), as a TorchTrainer fit's does.
        profile = profile_options(getattr(run_config, "profile", None))
        self.fn = Profiled(fn, profile) if profile is not None else fn
        self.scaling_config = scaling_config
        self.base_config = base_config
        # "train_loop_config" for a TorchTrainer, None for f(config), "" for a trainer whose
        # whole config the trial's merges into (XGBoostTrainer's {"params": {...}})
        self.nested_key = nested_key
        self.run_config = run_config
        self.name_prefix = name_prefix
        # The shared-memory data (datasets, large captured arrays) of every trial of one
        # fit() is keyed by this, so trials on a node share one copy (client.bulk); freed
        # when the fit ends (bulk.release).
        self.data_key = uuid.uuid4().hex

    # TuneConfig(trial_name_creator=, trial_dirname_creator=): f(trial) -> str, set by the Tuner
    name_creator = None
    dirname_creator = None

    def new_trial(self, trial_id: str, config: dict, experiment_path: str):
        """A new PENDING :class:`Trial` with its name and run directory under ``experiment_path``.

        Raises:
            ValueError: a ``trial_dirname_creator`` that returned no plain directory name."""
        from .trial import Trial

        trial = Trial(trial_id, config, extra={"trainable_name": self.name_prefix})
        if self.name_creator is not None:
            trial.extra["name"] = str(self.name_creator(trial))
        dirname = f"{self.name_prefix}_{trial_id}"
        if self.dirname_creator is not None:
            dirname = str(self.dirname_creator(trial))
            if not dirname or "/" in dirname or "\0" in dirname or dirname in (".", ".."):
                raise ValueError(
                    f"TuneConfig(trial_dirname_creator=...) returned {dirname!r} for trial "
                    f"{trial_id}: return a plain directory name, unique per trial"
                )
            given = self.__dict__.setdefault("_dirnames", {})
            if given.setdefault(dirname, trial_id) != trial_id:
                # Two trials in one directory overwrite each other's results and checkpoints.
                raise ValueError(
                    f"TuneConfig(trial_dirname_creator=...) returned {dirname!r} for trial "
                    f"{trial_id} and for trial {given[dirname]}: return a name unique per trial "
                    "(include trial.trial_id)"
                )
        trial.extra["dirname"] = dirname
        trial.path = str(Path(experiment_path) / dirname)
        return trial

    def fn_config(self, trial_config: dict):
        if self.nested_key is None:
            return trial_config
        from .search.variant_generator import deep_update

        if self.nested_key == "":
            return deep_update(self.base_config or {}, trial_config)
        return deep_update(self.base_config or {}, trial_config.get(self.nested_key) or {})


def adopt_checkpoint(run_path: str, source: str, checkpoint_config, metrics: dict) -> dict:
    """Copy the checkpoint directory ``source`` into the ended run at ``run_path`` as its
    newest committed checkpoint (``checkpoint_000NNN``, recorded in its ``run.json``), so
    resuming the run resumes from it. Uses the head's own CheckpointStore (copy to a staging
    directory, then an atomic rename), so the run directory stays as the head writes it.

    Returns:
        ``{"index", "name", "path", "metrics"}`` of the new checkpoint.

    Raises:
        CorruptRunDirectory: ``run_path`` holds no readable ``run.json``.
        OSError: the copy failed (the run's checkpoints are left as they were).
    """
    from ..cluster.storage.checkpoints import CheckpointStore

    record = read_run_dir(run_path, with_reports=False)
    cc = checkpoint_config
    config = (
        None
        if cc is None
        else {
            "num_to_keep": cc.num_to_keep,
            "checkpoint_score_attribute": cc.checkpoint_score_attribute,
            "checkpoint_score_order": cc.checkpoint_score_order,
        }
    )
    store = CheckpointStore(run_path, config, record.get("checkpoints"))
    staging = Path(run_path) / ".staging" / f"adopt_{store.next_index}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        shutil.copytree(source, staging / "rank_0")
    except BaseException:
        shutil.rmtree(Path(run_path) / ".staging", ignore_errors=True)  # no half copy left
        raise
    entry = store.commit([str(staging / "rank_0")], metrics)
    record["checkpoints"] = [{k: v for k, v in c.items() if k != "path"} for c in store.records()]
    for key in ("path", "params", "reports", "output"):
        record.pop(key, None)  # added by read_run_dir, not part of run.json
    write_json_atomic(Path(run_path) / RUN_STATE_FILE, record)
    return entry


def adopt_first_checkpoint(run_path: str, sources: list, checkpoint_config, metrics: dict) -> dict | None:
    """:func:`adopt_checkpoint` from the first of ``sources`` that copies whole, or None.

    ``sources``: checkpoint paths, or callables returning one (read when reached). A source
    may be pruned before or while it is copied (its trial ran on, with ``num_to_keep``): that
    copy fails (FileNotFoundError, shutil.Error) and the next source is tried.
    """
    for source in sources:
        source = source() if callable(source) else source
        if not source:
            continue
        try:
            return adopt_checkpoint(run_path, source, checkpoint_config, metrics)
        except (FileNotFoundError, shutil.Error):
            continue
    return None


def newest_checkpoint(run_path: str | None) -> str | None:
    """The newest committed checkpoint of the run at ``run_path`` (from its run.json)."""
    if not run_path:
        return None
    try:
        checkpoints = read_run_dir(run_path, with_reports=False).get("checkpoints") or []
    except (OSError, ValueError):
        return None
    return checkpoints[-1]["path"] if checkpoints else None


def write_params(run_path: str, config) -> None:
    """Rewrite the run's params.json (a resumed run keeps the one it started with)."""
    from ..client.submit_and_follow import _json_safe

    write_json_atomic(Path(run_path) / "params.json", _json_safe(config if config is not None else {}))
