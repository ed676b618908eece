"""A trial's reports in the driver: only the newest are held in memory, the rest are read
from the trial's ``result.json`` when an API asks; the driver's memory per trial does not
grow with the number of reports; after a scheduler's STOP the trial's files hold exactly
the reports its Result returns."""

from __future__ import annotations

import csv
import gc
import json
import sys
import tracemalloc
from pathlib import Path

import cloudpickle

from raynb import tune
from raynb.train import RunConfig
from raynb.tune.report_history import WINDOW, ReportHistory, truncate_reports
from raynb.tune.schedulers import ASHAScheduler
from raynb.tune.trial import Trial

cloudpickle.register_pickle_by_value(sys.modules[__name__])

QUIET = RunConfig(verbose=0)


def _trial_with_dir(tmp_path: Path, n: int) -> Trial:
    """A trial whose ``result.json`` holds ``n`` reports, appended as the driver does."""
    t = Trial("t_00001", {})
    t.path = str(tmp_path)
    with open(tmp_path / "result.json", "w") as f:
        for i in range(1, n + 1):
            row = {"training_iteration": i, "loss": 1.0 / i}
            f.write(json.dumps(row) + "\n")
            t.results.append({**row, "trial_id": t.trial_id})
    return t


def test_only_the_newest_reports_stay_in_memory_the_rest_come_from_result_json(tmp_path):
    t = _trial_with_dir(tmp_path, 100)
    assert len(t.results) == 100 and len(t.results.recent) == WINDOW
    assert t.last_result["training_iteration"] == 100
    assert t.results[-WINDOW]["training_iteration"] == 100 - WINDOW + 1
    every = list(t.results)
    assert [r["training_iteration"] for r in every] == list(range(1, 101))
    assert all(r["trial_id"] == "t_00001" for r in every)
    assert t.results[0]["training_iteration"] == 1
    assert [r["training_iteration"] for r in t.results[10:13]] == [11, 12, 13]


def test_without_a_directory_every_report_stays_in_memory():
    t = Trial("t_00002", {})
    for i in range(50):
        t.results.append({"i": i})
    assert len(t.results.recent) == 50 and [r["i"] for r in t.results] == list(range(50))
    t.results = [{"i": 0}]  # a list assigned (a restore) becomes a history
    assert isinstance(t.results, ReportHistory) and t.results == [{"i": 0}]


def test_a_directory_changed_behind_the_trial_is_named(tmp_path, monkeypatch):
    import pytest

    from raynb.tune import report_history

    monkeypatch.setattr(report_history, "DISK_WAIT_S", 0.1)
    t = _trial_with_dir(tmp_path, 40)
    (tmp_path / "result.json").write_text("")
    with pytest.raises(RuntimeError, match="result.json holds 0 reports"):
        list(t.results)


def test_truncate_reports_cuts_both_files_to_the_accepted_reports(tmp_path):
    (tmp_path / "result.json").write_text("".join(json.dumps({"i": i}) + "\n" for i in range(10)))
    with open(tmp_path / "progress.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["i", "note"])
        w.writerows([[i, "a,\nb"] for i in range(10)])
    (tmp_path / "result.json").chmod(0o600)
    truncate_reports(str(tmp_path), 4)
    assert len((tmp_path / "result.json").read_text().splitlines()) == 4
    assert (tmp_path / "result.json").stat().st_mode & 0o777 == 0o600
    with open(tmp_path / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["i"] for r in rows] == ["0", "1", "2", "3"] and rows[0]["note"] == "a,\nb"


def many_reports(config):
    from raynb import tune

    for i in range(config["reports"]):
        tune.report({"score": config["x"] + i, "pad": "x" * 200})


def _held_per_trial(trials: int, reports: int) -> tuple[float, object]:
    """Bytes the driver still holds per trial once ``fit()`` returned (its ResultGrid
    alive), traced by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    grid = tune.Tuner(
        many_reports,
        param_space={"x": tune.uniform(0, 1), "reports": reports},
        tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=trials),
        run_config=QUIET,
    ).fit()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return held / trials, grid


def test_driver_memory_per_trial_does_not_grow_with_reports_or_trials(cluster):
    _held_per_trial(4, 2)  # warm-up: what the first fit imports (numpy's random, ...)
    few, _ = _held_per_trial(4, 20)
    many, grid = _held_per_trial(4, 200)
    more_trials, _ = _held_per_trial(40, 200)
    # Every report held was ~0.4 KB: 200 a trial made ~80 KB against ~11 KB at 20.
    assert many < few * 1.5, (few, many)
    assert more_trials < many * 1.5, (many, more_trials)
    r = grid[0]
    df = r.metrics_dataframe  # the whole history, read from the trial's directory
    assert list(df["training_iteration"]) == list(range(1, 201))
    assert r.metrics["training_iteration"] == 200
    best_all = grid.get_best_result(scope="all")
    assert best_all.metrics_dataframe["score"].max() == max(x.metrics_dataframe["score"].max() for x in grid)
    assert grid.get_best_result(scope="avg") is not None


def racing(config):
    from raynb import tune

    for i in range(300):  # fast: reports after the STOP reach the head before the cancel
        tune.report({"score": float(i)})


def test_after_a_stop_the_trial_files_hold_what_the_result_returns(cluster):
    grid = tune.Tuner(
        racing,
        tune_config=tune.TuneConfig(
            metric="score", mode="max", num_samples=2, scheduler=ASHAScheduler(max_t=3, grace_period=3)
        ),
        run_config=QUIET,
    ).fit()
    for r in grid:
        assert r.metrics["training_iteration"] == 3
        df = r.metrics_dataframe
        assert list(df["training_iteration"]) == [1, 2, 3]
        on_disk = [json.loads(line) for line in (Path(r.path) / "result.json").read_text().splitlines()]
        assert [row["training_iteration"] for row in on_disk] == [1, 2, 3]
        with open(Path(r.path) / "progress.csv", newline="") as f:
            assert [int(row["training_iteration"]) for row in csv.DictReader(f)] == [1, 2, 3]


def test_the_trial_tables_curve_stays_bounded_and_keeps_its_ends():
    from raynb.notebook.trial_table.model import SERIES_POINTS, TuneProgress

    p = TuneProgress(metric="loss", mode="min", total_workers=1)
    p.add_trial("t1", {"lr": 0.1})
    for i in range(1, 5001):
        p.add_result("t1", {"training_iteration": i, "loss": 1.0 / i})
    (row,) = [r for r in p.rows() if r.trial_id == "t1"]
    assert len(row.series) <= SERIES_POINTS + 1
    assert row.series[0][0] == 1 and row.series[-1] == (5000, 1.0 / 5000)
    assert row.reports == 5000 and row.best == 1.0 / 5000


def test_a_trial_whose_result_json_is_not_seen_here_keeps_every_report(tmp_path):
    t = Trial("t_00003", {})
    t.path = str(tmp_path / "elsewhere")  # the head's directory, not on this machine
    for i in range(40):
        t.results.append({"i": i})
    assert len(t.results.recent) == 40 and [r["i"] for r in t.results] == list(range(40))
