"""Every rank's logs: the run directory keeps all of each rank's output (stderr marked),
``Result.logs(rank=N)`` reads it back, also after a head restart, and the progress
pane's log view shows any rank's recent lines (the widget tested without a browser)."""

from __future__ import annotations

import json
import pickle
import sys

import cloudpickle
import pytest

from raynb.cluster.storage import run_logs
from raynb.cluster.storage.rundir import RunDirectory
from raynb.notebook.run_pane import widget as widgets_mod
from raynb.notebook.run_pane.log_view import ALL, LogTail, LogView
from raynb.notebook.run_pane.model import RunProgress
from raynb.train import Result
from raynb.train.logs import RunLogs

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def out(rank, text, stream="stdout"):
    return {"kind": "output", "rank": rank, "stream": stream, "text": text}


# -- output.log: written tagged, read back whole or per rank -------------------------------
def _rundir(tmp_path) -> RunDirectory:
    rd = RunDirectory(str(tmp_path), "r")
    rd.append_output(0, "a\nb\n")
    rd.append_output(1, "warn\n", "stderr")
    rd.append_output(1, "dots", "stdout")  # a flush without newline: the line waits
    rd.append_output(0, "c\n")
    rd.append_output(1, "...done\n", "stdout")
    rd.append_output(2, "never ended", "stderr")
    rd.close()  # the run's end writes what still waits
    return rd


def test_output_log_tags_rank_and_stderr_and_keeps_partial_lines_whole(tmp_path):
    rd = _rundir(tmp_path)
    assert (rd.path / "output.log").read_text() == (
        "(rank 0) a\n(rank 0) b\n(rank 1, stderr) warn\n(rank 0) c\n(rank 1) dots...done\n"
        "(rank 2, stderr) never ended\n"
    )
    assert run_logs.read_output(rd.path, 1) == "warn\ndots...done\n"
    assert run_logs.read_output(rd.path, 1, "stdout") == "dots...done\n"
    assert (
        run_logs.read_output(rd.path, None, "stderr")
        == "(rank 1, stderr) warn\n(rank 2, stderr) never ended\n"
    )
    assert run_logs.read_output(rd.path, 3) == ""
    assert run_logs.parse_line("(rank 12, stderr) (rank 3) x") == (12, "stderr", "(rank 3) x")
    assert run_logs.parse_line("untagged") == (None, "stdout", "untagged")


@pytest.mark.parametrize("block", [7, 64, 1 << 16])
def test_tail_reads_from_the_end_across_blocks(tmp_path, monkeypatch, block):
    monkeypatch.setattr(run_logs, "_BLOCK", block)
    rd = RunDirectory(str(tmp_path), "r")
    for i in range(300):
        rd.append_output(i % 3, f"line {i}\n", "stderr" if i % 10 == 0 else "stdout")
    rd.close()
    with open(rd.path / "output.log", "a") as f:
        f.write("(rank 0) torn, being writ")  # no newline: not a line yet
    entries, more = run_logs.tail_output(rd.path, rank=0, lines=5)
    assert [test_rank_logs for _, _, test_rank_logs in entries] == [
        f"line {i}" for i in (285, 288, 291, 294, 297)
    ] and more
    assert run_logs.tail_output(rd.path, rank=0, stream="stderr", lines=2)[0] == [
        (0, "stderr", "line 240"),
        (0, "stderr", "line 270"),
    ]
    everything, more = run_logs.tail_output(rd.path, lines=1000)
    assert len(everything) == 300 and everything[0] == (0, "stderr", "line 0") and not more
    # A scan bounded in bytes says older lines may exist; no file is no lines.
    assert run_logs.tail_output(rd.path, rank=1, lines=1000, max_bytes=200)[1]
    assert run_logs.tail_output(tmp_path / "nowhere", lines=3) == ([], False)


@pytest.mark.parametrize(
    "rank, stream, why",
    [
        (-1, None, "give a rank number"),
        ("2", None, "give a rank number"),
        (True, None, "give a rank number"),
        (4, None, "this run has 4 rank"),
        (0, "err", "use 'stdout', 'stderr'"),
    ],
)
def test_bad_rank_or_stream_names_the_problem(tmp_path, rank, stream, why):
    rd = _rundir(tmp_path)
    logs = RunLogs([], str(rd.path), world_size=4)
    with pytest.raises(ValueError, match=why):
        logs(rank=rank, stream=stream)


def test_result_logs_is_still_the_tail_list_and_callable(tmp_path):
    rd = _rundir(tmp_path)
    (rd.path / "run.json").write_text(json.dumps({"name": "r", "state": "FINISHED", "world_size": 3}))
    (rd.path / "params.json").write_text("{}")
    r = Result.from_path(str(rd.path))  # no cluster
    assert (
        isinstance(r.logs, list)
        and "(rank 0) a" in r.logs
        and json.loads(json.dumps(r.logs))[0] == "(rank 0) a"
    )
    assert r.logs(rank=1) == "warn\ndots...done\n" and r.logs(rank=2, stream="stderr") == "never ended\n"
    assert r.logs().startswith("(rank 0) a\n")
    with pytest.raises(ValueError, match="this run has 3 rank"):  # world size from run.json
        r.logs(rank=3)
    again = pickle.loads(pickle.dumps(r))
    assert again.logs == r.logs and again.logs(rank=0) == "a\nb\nc\n"
    assert Result(path=str(rd.path), logs=["x"]).logs(rank=0) == "a\nb\nc\n"  # a plain list is wrapped
    with pytest.raises(FileNotFoundError, match="no such run directory"):
        RunLogs([], str(tmp_path / "gone"))(rank=0)


# -- the pane's log view: model and widget -------------------------------------------------
def test_log_tail_keeps_bounded_per_rank_tails_with_streams():
    test_rank_logs = LogTail(world_size=2, lines=3)
    for i in range(5):
        test_rank_logs.on_event(out(0, f"a{i}\n"))
    test_rank_logs.on_event(out(1, "err\n", "stderr"))
    test_rank_logs.on_event(out(1, "pro"))  # continued by the next text of rank 1's stdout
    test_rank_logs.on_event(out(0, "x\n"))
    test_rank_logs.on_event(out(1, "gress\n"))
    test_rank_logs.on_event(out(5, "late rank\n"))  # a rank past world_size is offered too
    for junk in (
        None,
        {"kind": "report"},
        out("0", "x"),
        out(-1, "x"),
        out(0, None),
        out(True, "x"),
        out(0, ""),
    ):
        assert not test_rank_logs.on_event(junk)
    assert test_rank_logs.lines(0) == [(0, "stdout", "a3"), (0, "stdout", "a4"), (0, "stdout", "x")]
    assert test_rank_logs.lines(1) == [(1, "stderr", "err"), (1, "stdout", "progress")]
    # All ranks in arrival order; a continued line stays where it started.
    assert test_rank_logs.lines(ALL) == [
        (1, "stdout", "progress"),
        (0, "stdout", "x"),
        (5, "stdout", "late rank"),
    ]
    assert test_rank_logs.ranks == [0, 1, 5] and test_rank_logs.lines(7) == []


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_log_view_selector_rank0_default_any_rank_or_all_stderr_marked():
    clock = FakeClock()
    view = LogView(world_size=3, min_interval_s=0.5, trailing=False, clock=clock)
    assert view.widget.layout.display == "none"  # nothing printed yet: hidden
    assert list(view.selector.options) == [("rank 0", 0), ("rank 1", 1), ("rank 2", 2), ("all ranks", ALL)]
    assert view.selector.value == 0
    view.handle(out(0, "hello <b>0</b>\n"))
    view.handle(out(2, "boom\n", "stderr"))
    assert view.widget.layout.display is None
    assert "hello &lt;b&gt;0&lt;/b&gt;" in view.text.value and "boom" not in view.text.value
    view.selector.value = 2  # the user picks rank 2: redrawn at once
    assert "[stderr] boom" in view.text.value and "color:#c62828" in view.text.value
    assert "hello" not in view.text.value
    view.selector.value = ALL
    assert "(rank 0) hello" in view.text.value and "(rank 2) [stderr] boom" in view.text.value
    # Throttled: a burst redraws once per interval, and a new rank extends the selector
    # without losing the user's choice.
    drawn = view.redraws
    clock.t = 10.0
    for i in range(50):
        view.handle(out(4, f"burst {i}\n"))
    assert view.redraws == drawn + 1 and view.selector.value == ALL
    assert ("rank 4", 4) in view.selector.options
    clock.t = 11.0
    view.refresh()
    assert "burst 49" in view.text.value
    view.close()
    view.handle(out(0, "after close\n"))
    assert "after close" not in view.text.value


def test_progress_pane_holds_the_log_view(monkeypatch):
    monkeypatch.setattr(widgets_mod, "ipy_display", lambda obj, display_id=None: None)
    pane = widgets_mod.ProgressPane(RunProgress("r", world_size=2), trailing=False)
    assert pane.log_view.widget in pane.widget.children
    refreshes = pane.refreshes
    pane.handle(out(1, "from one\n", "stderr"))
    assert pane.refreshes == refreshes  # output redraws only the log view
    pane.log_view.selector.value = 1
    assert "[stderr] from one" in pane.log_view.text.value
    assert pane.progress.output_tail[1] == ["from one"]  # the model is still fed
    pane.finish()
    assert pane.log_view.closed


def _table(path) -> tuple[list[str], list[dict]]:
    import csv

    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_progress_csv_is_not_rewritten_whole_at_every_new_metric(tmp_path):
    # Each report bringing a new key (report({f"loss_{epoch}": ...})) rewrote progress.csv at
    # every flush: 2,000 such reports took 24 s of the head's one thread, 5,000 six minutes.
    from raynb.cluster.storage import progress_table

    rd = RunDirectory(str(tmp_path), "r")
    rd.prepare_files()
    rewrites = []
    real = progress_table.ProgressTable._rewrite
    progress_table.ProgressTable._rewrite = lambda self, rows: (rewrites.append(len(rows)), real(self, rows))[
        1
    ]
    try:
        for i in range(3000):  # well within one REWRITE_EVERY_S, a tick's flush every 10 reports
            rd.append_result({"loss": 1 / (i + 1), f"m{i}": i}, None, None)
            if i % 10 == 9:
                rd.flush()
        waiting_before_close = rd._progress.waiting
        rd.close()
    finally:
        progress_table.ProgressTable._rewrite = real
    assert len(rewrites) <= 3 and rewrites[-1] == 3000, rewrites  # the first rows, maybe one more, the end
    assert waiting_before_close
    columns, rows = _table(tmp_path / "r" / "progress.csv")
    assert len(rows) == 3000 and [float(r["loss"]) for r in rows[:2]] == [1.0, 0.5]
    shown = [c for c in columns if c.startswith("m")]
    # Columns were added while the table stayed within MAX_REWRITE_CELLS; later ones left out.
    assert 300 < len(shown) < 3000 and shown == [f"m{i}" for i in range(len(shown))], len(shown)
    # (the last column shown came with row len(shown), the next flush's ten would have passed it)
    assert (
        len(shown) * len(columns)
        <= progress_table.MAX_REWRITE_CELLS
        < (len(shown) + 10) * (len(columns) + 10)
    )
    assert rows[5]["m5"] == "5" and rows[6]["m5"] == ""
    with open(tmp_path / "r" / "result.json") as f:  # every key, in every row, whatever the table shows
        assert [json.loads(line)[f"m{i}"] for i, line in enumerate(f)] == list(range(3000))


def test_a_new_metric_widens_progress_csv_within_a_second_and_a_resume_repairs_it(tmp_path):
    import time as _time

    from raynb.cluster.storage.progress_table import REWRITE_EVERY_S

    rd = RunDirectory(str(tmp_path), "r")
    rd.prepare_files()
    rd.append_result({"loss": 1.0}, None, None)
    rd.flush()
    rd.append_result({"loss": 0.5, "val_loss": 0.7}, None, None)  # a new metric, at once after a rewrite
    rd.flush()
    path = tmp_path / "r" / "progress.csv"
    assert _table(path)[0][:1] == ["loss"] and len(_table(path)[1]) == 1  # held for the rewrite
    deadline = _time.monotonic() + REWRITE_EVERY_S + 2
    while "val_loss" not in _table(path)[0] and _time.monotonic() < deadline:
        _time.sleep(0.05)
        rd.flush()  # the head's tick, with no new report
    columns, rows = _table(path)
    assert columns[:2] == ["loss", "training_iteration"] and "val_loss" in columns, columns
    assert [r["val_loss"] for r in rows] == ["", "0.7"]
    rd.append_result({"loss": 0.25}, None, None)
    rd.flush()
    assert len(_table(path)[1]) == 3  # appended again
    rd.close()
    # A resumed run whose progress.csv lost its last row (a head killed before writing it):
    # written again from result.json at its first write.
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n")
    again = RunDirectory(str(tmp_path), "r")
    again.load_existing()
    again.append_result({"loss": 0.125}, None, None)
    again.flush()
    again.close()
    assert [float(r["loss"]) for r in _table(path)[1]] == [1.0, 0.5, 0.25, 0.125]
