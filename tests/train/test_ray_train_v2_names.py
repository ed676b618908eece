"""Ray Train 2.60's (v2) names on warm ranks: get_all_reported_checkpoints (the run's
checkpoints with rank 0's metrics, in report order, the same on every rank), the trainer's
metadata and storage on TrainContext, get_preemption_info, report(validation=...)'s refusal,
and UserCallback's after_report / after_exception. One 2-rank run and one failing run on the
shared cluster."""

from __future__ import annotations

import json
import os
import sys

import cloudpickle
import pytest

import raynb
from raynb.train import (
    CheckpointConsistencyMode,
    ReportedCheckpointStatus,
    RunConfig,
    ScalingConfig,
    UserCallback,
    get_all_reported_checkpoints,
)
from raynb.train.torch import TorchTrainer

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _report(i: int, with_checkpoint: bool) -> None:
    import tempfile

    from raynb import train

    rank = train.get_context().get_world_rank()
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, f"rank{rank}.txt"), "w") as f:
            f.write(str(i))
        ckpt = train.Checkpoint.from_directory(d) if with_checkpoint else None
        train.report({"i": i, "said_by": rank}, checkpoint=ckpt)


def _refusals() -> dict:
    """What the bad calls raise, by name (none of them counts as a report)."""
    import tempfile

    from raynb import train

    here = train.Checkpoint.from_directory(tempfile.gettempdir())
    calls = {
        "mode": lambda: train.get_all_reported_checkpoints("COMMITTED"),
        "timeout": lambda: train.get_all_reported_checkpoints(timeout_s=0),
        "validation": lambda: train.report({"x": 1}, checkpoint=here, validation=True),
        "validation_alone": lambda: train.report({"x": 1}, validation=True),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = "no error"
        except Exception as e:
            out[name] = f"{type(e).__name__}: {e}"
    return out


def _loop(config):
    from raynb import train

    ctx = train.get_context()
    rank = ctx.get_world_rank()
    _report(1, rank == 0)  # a checkpoint from rank 0 only
    _report(2, rank == 1)  # from rank 1 only: rank 0's metrics still go with it
    _report(3, False)
    _report(4, True)  # from both: merged
    first = train.get_all_reported_checkpoints()
    again = train.get_all_reported_checkpoints(train.CheckpointConsistencyMode.COMMITTED, timeout_s=60)
    storage = ctx.get_storage()
    view = {
        "ckpts": [
            [os.path.basename(c.checkpoint.path), c.metrics["i"], c.metrics["said_by"], c.status.value]
            + [sorted(n for n in os.listdir(c.checkpoint.path) if not n.startswith("."))]
            for c in first
        ],
        "again": [os.path.basename(c.checkpoint.path) for c in again],
        "metadata": ctx.get_metadata(),
        "storage": [storage.experiment_fs_path, storage.experiment_dir_name, storage.storage_path],
        "preemption": train.get_preemption_info(),
        "refusals": _refusals(),
    }
    with open(os.path.join(config["out"], f"rank{rank}.json"), "w") as f:
        json.dump(view, f)


class _Recorder(UserCallback):
    def __init__(self):
        self.reports, self.exceptions = [], []

    def after_report(self, run_context, metrics, checkpoint):
        name = os.path.basename(checkpoint.path) if checkpoint is not None else None
        self.reports.append((metrics[0]["i"], name))

    def after_exception(self, run_context, worker_exceptions):
        self.exceptions.append({r: str(e) for r, e in worker_exceptions.items()})


@pytest.fixture(scope="module")
def two_rank_run(cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("views")
    recorder = _Recorder()
    result = TorchTrainer(
        _loop,
        train_loop_config={"out": str(out)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(verbose=0, callbacks=[recorder]),
        metadata={"owner": "team-a", "n": 3},
    ).fit()
    views = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    return result, views, recorder


def test_every_rank_sees_the_runs_checkpoints_in_report_order_with_rank0s_metrics(two_rank_run):
    result, views, _ = two_rank_run
    expected = [
        ["checkpoint_000000", 1, 0, "COMMITTED", ["rank0.txt"]],
        ["checkpoint_000001", 2, 0, "COMMITTED", ["rank1.txt"]],
        ["checkpoint_000002", 4, 0, "COMMITTED", ["rank0.txt", "rank1.txt"]],
    ]
    assert views[0]["ckpts"] == expected
    assert views[1]["ckpts"] == expected  # consistent across ranks
    assert views[0]["again"] == views[1]["again"] == [e[0] for e in expected]
    assert [os.path.basename(c.path) for c, _ in result.best_checkpoints] == [e[0] for e in expected]


def test_context_gives_the_trainers_metadata_and_the_runs_storage(two_rank_run):
    result, views, _ = two_rank_run
    for v in views:
        assert v["metadata"] == {"owner": "team-a", "n": 3}
        assert v["storage"] == [result.path, os.path.basename(result.path), os.path.dirname(result.path)]
        assert v["preemption"] is None


def test_bad_calls_on_a_rank_name_the_problem_and_the_fix(two_rank_run):
    _, views, _ = two_rank_run
    refusals = views[0]["refusals"]
    assert refusals["mode"].startswith("TypeError") and "CheckpointConsistencyMode" in refusals["mode"]
    assert refusals["timeout"].startswith("ValueError") and "seconds > 0" in refusals["timeout"]
    assert refusals["validation"].startswith("NotImplementedError")
    assert "ValidationConfig" in refusals["validation"] and "rank 0" in refusals["validation"]
    assert (
        refusals["validation_alone"].startswith("ValueError")
        and "checkpoint=" in refusals["validation_alone"]
    )


def test_user_callback_gets_each_report_with_its_committed_checkpoint(two_rank_run):
    _, _, recorder = two_rank_run
    assert recorder.reports == [
        (1, "checkpoint_000000"),
        (2, "checkpoint_000001"),
        (3, None),
        (4, "checkpoint_000002"),
    ]
    assert recorder.exceptions == []


def _fails(config):
    from raynb import train

    train.report({"i": 1})
    if train.get_context().get_world_rank() == 1:
        raise ValueError("bad batch")


def test_user_callback_after_exception_when_a_rank_raises(cluster):
    recorder = _Recorder()
    with pytest.raises(raynb.train.TrainingFailedError):
        TorchTrainer(
            _fails,
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(verbose=0, callbacks=[recorder]),
        ).fit()
    assert recorder.reports == [(1, None)]
    assert len(recorder.exceptions) == 1 and "bad batch" in next(iter(recorder.exceptions[0].values()))


def test_outside_a_run_and_bad_trainer_input_are_refused():
    with pytest.raises(RuntimeError, match="outside a training function"):
        get_all_reported_checkpoints()
    with pytest.raises(TypeError, match="JSON"):
        TorchTrainer(lambda: None, metadata={"f": object()})
    assert CheckpointConsistencyMode.VALIDATED.value == "VALIDATED"
    assert ReportedCheckpointStatus.COMMITTED.value == "COMMITTED"


def test_status_shows_each_workers_kind(cluster):
    from raynb.client.status import format_status

    st = cluster.status()
    table = format_status(st).splitlines()
    header = next(i for i, line in enumerate(table) if line.startswith("worker"))
    assert "kind" in table[header].split()
    rows = [
        line for line in table[header + 1 :] if line.split()[0] in {w["worker_id"] for w in st["workers"]}
    ]
    assert rows and all(line.split()[3] == "torch" for line in rows)  # worker, pid, state, kind
    assert {w["kind"] for w in st["workers"]} == {"torch"}


def test_error_classes_are_training_failed_errors_with_rays_fields():
    import pickle

    from raynb.train import (
        ControllerError,
        NCCLHangError,
        PreemptionError,
        PreemptionInfo,
        TrainingFailedError,
        WorkerGroupError,
    )

    wge = WorkerGroupError("rank 1 failed", {1: ValueError("bad")})
    assert isinstance(wge, TrainingFailedError) and str(wge).startswith(
        "Training failed due to worker errors"
    )
    again = pickle.loads(pickle.dumps(wge))
    assert str(again.worker_failures[1]) == "bad" and str(again) == str(wge)
    assert issubclass(NCCLHangError, WorkerGroupError)
    ce = ControllerError(RuntimeError("lost head"))
    assert "lost head" in str(ce) and isinstance(ce.controller_failure, RuntimeError)
    info = PreemptionInfo(deadline_ms=5, preempted_node_to_ranks={"b": [3, 1], "a": [2]})
    assert info.preempted_node_ids == ["a", "b"] and info.preempted_ranks == [1, 2, 3]
    pe = pickle.loads(pickle.dumps(PreemptionError(info, drain_timed_out=True)))
    assert "preempted_ranks=[1, 2, 3]" in str(pe) and pe.drain_timed_out


def test_validation_and_logging_configs_check_their_arguments():
    from raynb.train import LoggingConfig, ValidationConfig, ValidationTaskConfig

    assert ValidationTaskConfig().fn_kwargs == {}
    with pytest.raises(ValueError, match="seconds > 0"):
        ValidationTaskConfig(timeout_s=0)
    cfg = ValidationConfig(lambda checkpoint, **kw: {"score": 1})
    assert cfg.task_config == ValidationTaskConfig() and cfg.ray_remote_kwargs == {}
    with pytest.raises(TypeError, match="fn"):
        ValidationConfig(fn=3)
    assert LoggingConfig("debug").log_level == "DEBUG"
    with pytest.raises(ValueError, match="WARNING"):
        LoggingConfig("loud")
    with pytest.raises(TypeError, match="LoggingConfig"):
        RunConfig(logging_config="DEBUG")


def test_user_callback_pairs_late_checkpoints_with_their_reports():
    """The order raynb's events can come in when rank 1 lags: rank 0's reports 1-3 first."""
    from raynb.train import Checkpoint
    from raynb.train.experiment_callback import TrialSnapshot

    trial = TrialSnapshot("t_00000", {})
    rec = _Recorder()
    for i in (1, 2, 3):
        rec.on_trial_result(i, [], trial, {"i": i, "training_iteration": i})
    assert rec.reports == []  # held: a checkpoint may still come for each
    ck = Checkpoint("/x/checkpoint_000000")
    ck._report_metrics = {"i": 2, "training_iteration": 2}
    rec.on_checkpoint(4, [], trial, ck)
    assert rec.reports == [(1, None), (2, "checkpoint_000000")]  # 1 had none: commits come in order
    rec.on_trial_complete(5, [], trial)
    assert rec.reports[-1] == (3, None)


def _says_owner():
    from raynb import train

    train.report({"owner": train.get_context().get_metadata().get("owner", "none")})


def test_a_restored_trainer_keeps_its_metadata(cluster):
    first = TorchTrainer(
        _says_owner,
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(verbose=0),
        metadata={"owner": "b"},
    ).fit()
    assert first.metrics["owner"] == "b"
    again = TorchTrainer.restore(first.path)
    assert again.metadata == {"owner": "b"}
    assert again.fit().metrics["owner"] == "b"
