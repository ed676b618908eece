"""The profiler (``RunConfig(profile=...)``, ``%%ray_train --profile``,
``raynb.train.torch.profile()``) on the real warm cluster: a Chrome trace per rank that
parses as JSON, the per-rank top-operator table naming the matmul and the all-reduce,
a run too short for its window, a failed rank, and the warm workers left unprofiled."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cloudpickle
import pytest
from conftest import ok_cell, run_cell
from IPython.core.error import UsageError

import raynb
from raynb.train import RunConfig, ScalingConfig
from raynb.train.fit_run import execute_run
from raynb.train.profile_result import RunProfile
from raynb.train.torch import TorchTrainer

cloudpickle.register_pickle_by_value(sys.modules[__name__])

COLLECTIVES = ("c10d::allreduce_", "gloo:all_reduce")


def matmul_allreduce(config):
    """``n`` steps of three matmuls and an all_reduce, one report each; then, when
    ``fail``, rank 1 raises; returns whether the profiler is on now (rank 0)."""
    import torch
    import torch.distributed as dist

    from raynb.train import report

    a = torch.randn(64, 64)
    for i in range(config["n"]):
        for _ in range(3):
            b = a @ a
        dist.all_reduce(b)
        report({"step": i})
    if config.get("fail") and dist.get_rank() == 1:
        raise ValueError("rank 1 gives up")
    return torch.autograd._profiler_enabled()


def fit(n: int, profile, workers: int = 4, **extra):
    trainer = TorchTrainer(
        matmul_allreduce,
        train_loop_config={"n": n, **extra},
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(profile=profile),
    )
    return trainer.fit()


def traces_parse(path: str, ranks: range, op: str | None = "aten::mm") -> None:
    for r in ranks:
        trace = Path(path) / "profile" / f"rank_{r}.json"
        assert trace.is_file(), f"no trace for rank {r}: {sorted((Path(path) / 'profile').iterdir())}"
        events = json.loads(trace.read_text())["traceEvents"]
        assert op is None or any(e.get("name") == op for e in events), f"rank {r}'s trace has no {op}"


def test_four_ranks_write_a_chrome_trace_each_and_the_table_names_mm_and_allreduce(warm, capsys):
    result = fit(6, True)
    traces_parse(result.path, range(4))
    prof = result.profile
    assert isinstance(prof, RunProfile) and sorted(prof.traces) == [0, 1, 2, 3]
    assert prof.notes == []  # 6 reports >= wait+warmup+active = 5: a complete window
    table = prof.table(n=50)
    assert list(table.columns) == ["calls", "rank 0", "rank 1", "rank 2", "rank 3"]
    assert "aten::mm" in table.index
    assert table.loc["aten::mm", "calls"] == 9  # 3 matmuls x 3 active steps
    assert any(c in table.index for c in COLLECTIVES), list(table.index)
    assert (table.loc["aten::mm", ["rank 0", "rank 1", "rank 2", "rank 3"]] > 0).all()
    rank2 = prof[2].set_index("name")
    assert rank2.loc["aten::mm", "calls"] == 9 and rank2.loc["aten::mm", "self_cpu_us"] > 0
    comms = prof.table(by="cpu_total_us", collectives=True)
    assert set(comms.index) <= set(COLLECTIVES) and len(comms) >= 1
    assert prof.step_ms().notna().all() and len(prof.step_ms()) == 4
    shown = capsys.readouterr().out  # execute_run showed the table after the run
    assert "top operators by self CPU time" in shown and "aten::mm" in shown and "rank 3" in shown
    assert "collectives" in shown
    assert "<table" in prof._repr_html_() and "aten::mm" in prof._repr_html_()
    # The profiler stopped at the window's end: the warm workers' next run is not profiled.
    result2, profiling_on = execute_run(matmul_allreduce, {"n": 2}, ScalingConfig(4), RunConfig(verbose=0))
    assert profiling_on is False
    assert result2.profile is None and not (Path(result2.path) / "profile").exists()


def test_ray_train_profile_magic_shows_the_table(ip):
    cell = """%%ray_train --workers 2 --profile 0,1,2
import torch
a = torch.randn(32, 32)
for i in range(4):
    b = a @ a
    torch.distributed.all_reduce(b)
    report({"i": i})
"""
    res, cap = ok_cell(ip, cell)
    result = ip.user_ns["_ray_result"]
    traces_parse(result.path, range(2))
    assert sorted(result.profile.traces) == [0, 1] and result.profile.notes == []
    first = result.profile.summaries[0]
    assert first["schedule"] == {"wait": 0, "warmup": 1, "active": 2} and first["recorded_steps"] == 2
    shown = [o.data for o in cap.outputs if "aten::mm" in o.data.get("text/plain", "")]
    assert shown, f"no profile table displayed: {[o.data for o in cap.outputs]}\n{cap.stdout}"
    assert "<table" in shown[0]["text/html"] and "rank 1" in shown[0]["text/html"]


def test_ray_train_profile_bad_schedule_is_a_usage_error(shell):
    for bad in ("1,2", "a,b,c", "1,1,0"):
        res, cap = run_cell(shell, f"%%ray_train --workers 1 --profile {bad}\nreport({{'x': 1}})\n")
        assert isinstance(res.error_in_exec, UsageError), (bad, res.error_in_exec)
        assert "--profile" in str(res.error_in_exec)


def test_run_too_short_for_its_window_says_so_and_writes_what_it_had(warm, capsys):
    result = fit(2, True, workers=2)
    expected = (
        "profile: the run made 2 reports; the schedule needs wait+warmup+active=1+1+3=5; wrote what it had"
    )
    assert any(n.startswith(expected) for n in result.profile.notes), result.profile.notes
    assert "] note: " + expected in capsys.readouterr().out  # rank 0's note, in the progress text
    traces_parse(result.path, range(2), op=None)  # the one recorded step: report 2 to the end
    assert result.profile.summaries[1]["complete"] is False

    result = fit(1, True, workers=2)  # ended before recording started: nothing to trace
    note = result.profile.notes[0]
    assert "made 1 report;" in note and "recorded nothing" in note and "--profile 0,0,1" in note
    assert result.profile.traces == {}
    assert sorted(p.name for p in (Path(result.path) / "profile").iterdir()) == [
        "rank_0_top.json",
        "rank_1_top.json",
    ]


def test_a_failed_rank_still_writes_its_profile(warm):
    with pytest.raises(raynb.RunError, match="rank 1 gives up") as info:
        fit(3, dict(wait=0, warmup=1, active=5), workers=2, fail=True)
    assert "profiling.py" not in str(info.value)  # the traceback starts at the user's code
    assert "in matmul_allreduce" in str(info.value)
    prof = info.value.result.profile
    assert sorted(prof.traces) == [0, 1]  # rank 0 (cancelled, maybe before its 3rd report) too
    assert "made 3 reports" in prof.summaries[1]["note"]
    traces_parse(info.value.result.path, range(2))


def explicit_block(config):
    import torch

    import raynb

    a = torch.randn(32, 32)
    with raynb.train.torch.profile(wait=0, warmup=1, active=2) as prof:
        for _ in range(3):
            a @ a
            prof.step()
    raynb.train.report({"steps": prof.steps})


def test_profile_context_is_stepped_by_prof_step(warm):
    result = TorchTrainer(
        explicit_block, scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(verbose=0)
    ).fit()
    traces_parse(result.path, range(2))
    assert result.profile.notes == [] and result.profile.summaries[0]["unit"] == "prof.step() calls"


def nested_block():
    import raynb

    with raynb.train.torch.profile():
        pass


def test_profile_context_in_a_profiled_run_is_refused(warm):
    with pytest.raises(raynb.RunError, match="profiled already"):
        TorchTrainer(
            nested_block,
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(profile=True, verbose=0),
        ).fit()


def test_restore_of_a_profiled_run_runs_unprofiled_unless_asked(warm):
    result = fit(2, True, workers=2)
    top = Path(result.path) / "profile" / "rank_0_top.json"
    written = top.read_text()
    restored = TorchTrainer.restore(result.path).fit()  # function.pkl holds the profiled wrapper
    assert restored.state == "FINISHED" and top.read_text() == written
    again = TorchTrainer.restore(result.path, run_config=RunConfig(profile=dict(wait=0, warmup=0, active=1)))
    again.fit()
    assert json.loads(top.read_text())["schedule"] == {"wait": 0, "warmup": 0, "active": 1}


def test_tuner_profiles_every_trial_into_its_own_directory(warm):
    """Tuner(run_config=RunConfig(profile=...)): each trial's ranks write their traces
    into the trial's run directory, and each trial's Result.profile reads them."""
    from raynb import tune

    grid = tune.Tuner(
        TorchTrainer(
            matmul_allreduce, train_loop_config={"n": 4}, scaling_config=ScalingConfig(num_workers=2)
        ),
        param_space={"train_loop_config": {"seed": tune.grid_search([1, 2])}},
        tune_config=tune.TuneConfig(metric="step", mode="max"),
        run_config=RunConfig(verbose=0, profile=dict(wait=0, warmup=1, active=2)),
    ).fit()
    assert len(grid) == 2
    for result in grid:
        traces_parse(result.path, range(2))
        assert isinstance(result.profile, RunProfile) and "aten::mm" in result.profile[0]["name"].tolist()
