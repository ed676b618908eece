"""Tune's trial table: the model, the text view, the ipywidgets pane (built
in-process, without a browser), throttling, and the choice between views."""

from __future__ import annotations

import io
import re
import time

import pytest

from raynb.notebook.display import NullTuneDisplay, tune_display
from raynb.notebook.trial_table import widget as widget_mod
from raynb.notebook.trial_table.model import TuneProgress, flatten
from raynb.notebook.trial_table.text import TuneTableText
from raynb.notebook.trial_table.widget import TuneTablePane

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class FakeClock:
    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def experiment(mode="min", clock=None) -> TuneProgress:
    """Four trials with known final val_loss: t0 0.5 (TERMINATED), t1 0.2 (RUNNING),
    t2 0.9 (STOPPED after 2), t3 never reported (PENDING)."""
    p = TuneProgress(
        "val_loss", mode, total_workers=2, param_keys=["lr", "model/width"], clock=clock or time.time
    )
    finals = {"t0": 0.5, "t1": 0.2, "t2": 0.9}
    for i, tid in enumerate(["t0", "t1", "t2", "t3"]):
        p.add_trial(tid, {"lr": 0.1 / (i + 1), "model": {"width": 16 * (i + 1)}, "epochs": 3})
    for tid, final in finals.items():
        p.set_status(tid, "RUNNING")
        n = 2 if tid == "t2" else 3
        for it in range(1, n + 1):  # falls to `final` at iteration n
            p.add_result(
                tid, {"training_iteration": it, "time_total_s": 0.5 * it, "val_loss": final + (n - it) * 0.3}
            )
    p.set_status("t0", "TERMINATED")
    p.set_status("t2", "STOPPED")
    p.set_workers(1, 2)
    return p


# ------------------------------------------------------------------- the model
def test_rows_sorted_by_latest_metric_per_mode_best_and_counts():
    p = experiment("min")
    assert [r.trial_id for r in p.rows()] == ["t1", "t0", "t2", "t3"]  # no value: last
    assert p.best_trial_id == "t1"
    assert p.counts == {"RUNNING": 1, "PENDING": 1, "TERMINATED": 1, "STOPPED": 1}
    assert p.workers == (1, 2)
    t1 = next(r for r in p.rows() if r.trial_id == "t1")
    assert (t1.iteration, t1.time_total_s, t1.latest, t1.best) == (
        3,
        1.5,
        pytest.approx(0.2),
        pytest.approx(0.2),
    )
    assert t1.series == [(1, pytest.approx(0.8)), (2, pytest.approx(0.5)), (3, pytest.approx(0.2))]
    assert t1.config == {"lr": 0.05, "model/width": 32, "epochs": 3}

    p = experiment("max")
    assert [r.trial_id for r in p.rows()] == ["t2", "t0", "t1", "t3"]
    assert p.best_trial_id == "t2"
    t2 = p.rows()[0]
    assert t2.best == pytest.approx(1.2) and t2.latest == pytest.approx(0.9)  # best is per mode


def test_ranking_uses_latest_value_and_best_column_keeps_the_best():
    p = TuneProgress("loss", "min", 1, [])
    p.add_trial("a", {})
    p.add_trial("b", {})
    for v in (0.1, 0.6):  # a was best, then got worse
        p.add_result("a", {"loss": v})
    p.add_result("b", {"loss": 0.4})
    assert [r.trial_id for r in p.rows()] == ["b", "a"]
    assert p.best_trial_id == "b"  # as get_best_result(scope="last")
    a = p.rows()[1]
    assert (a.latest, a.best, a.iteration) == (0.6, 0.1, 2)  # iteration counted without training_iteration


def test_status_changes_config_updates_and_bad_input():
    p = TuneProgress("loss", "min", 2, [])
    p.add_trial("x", {"lr": 0.1})
    assert p.rows()[0].status == "PENDING"
    p.add_result("x", {"training_iteration": 1, "loss": 1.0})
    assert p.rows()[0].status == "RUNNING"  # a report proves it runs
    p.add_trial("x", {"lr": 0.2})  # PBT's explore: new config, same trial
    r = p.rows()[0]
    assert r.config == {"lr": 0.2} and r.status == "RUNNING" and r.latest == 1.0
    p.set_status("x", "error", error="Traceback (most recent call last):\n  ...\nValueError: boom")
    assert p.errors == [("x", "Traceback (most recent call last):\n  ...\nValueError: boom")]
    assert p.counts == {"ERROR": 1}
    p.set_status("late", "RUNNING")  # before add_trial: shown, not dropped
    assert [r.trial_id for r in p.rows()] == ["x", "late"]
    with pytest.raises(ValueError, match="unknown trial status 'DONE'"):
        p.set_status("x", "DONE")
    with pytest.raises(ValueError, match="mode must be 'min', 'max' or None, got 'minimum'"):
        TuneProgress("loss", "minimum", 1, [])
    before = p.version
    p.add_result("x", "not a dict")  # junk from the wire is ignored
    p.add_result("x", {"loss": float("nan")})  # a report, but no metric value
    assert p.rows()[0].latest == 1.0 and p.version == before + 1


def test_without_metric_trials_keep_their_order_and_no_metric_columns():
    p = TuneProgress(None, None, 1, [])
    for tid, v in [("b", 2.0), ("a", 1.0)]:
        p.add_trial(tid, {"k": v})
        p.add_result(tid, {"loss": v})
    assert [r.trial_id for r in p.rows()] == ["b", "a"]
    assert p.best_trial_id is None
    assert list(p.dataframe().columns) == ["trial_id", "status", "k", "iter", "time (s)"]
    assert p.plot_png() is None


def test_flatten_and_train_loop_config_columns():
    assert flatten({"a": 1, "b": {"c": 2, "d": {"e": 3}}, "f": {}}) == {"a": 1, "b/c": 2, "b/d/e": 3, "f": {}}
    p = TuneProgress("acc", "max", 4, [])
    p.add_trial("t", {"train_loop_config": {"lr": 0.01, "hidden": 64}})
    df = p.dataframe()
    assert list(df.columns) == ["trial_id", "status", "lr", "hidden", "iter", "time (s)", "acc", "max acc"]
    assert df.loc[0, "lr"] == 0.01


# ------------------------------------------------------------------- text
def test_text_table_exact():
    clock = FakeClock(100.0)
    p = experiment("min", clock=clock)
    clock.t = 112.34
    assert p.status_line() == (
        "4 trials: 1 RUNNING, 1 PENDING, 1 TERMINATED, 1 STOPPED | 12.3s | "
        "workers 1/2 | best trial t1 by last result: val_loss 0.2 (min val_loss 0.2)"
    )
    assert p.text_table().splitlines() == [
        "  trial_id status          lr model/width iter time (s) val_loss min val_loss",
        "* t1       RUNNING       0.05          32    3      1.5      0.2          0.2",
        "  t0       TERMINATED     0.1          16    3      1.5      0.5          0.5",
        "  t2       STOPPED    0.03333          48    2      1.0      0.9          0.9",
        "  t3       PENDING      0.025          64                                    ",
    ]


def test_text_table_before_any_report_is_blank_not_none():
    p = TuneProgress("loss", "min", 2, ["x"])
    p.add_trial("a_00000", {"x": 0.5})
    p.add_trial("a_00001", {"x": -1})
    p.set_status("a_00000", "RUNNING")
    assert p.text_table().splitlines() == [
        "  trial_id status    x iter time (s) loss min loss",
        "  a_00000  RUNNING 0.5                            ",
        "  a_00001  PENDING  -1                            ",
    ]


def test_row_limit_keeps_best_and_running_and_counts_the_rest():
    p = TuneProgress("loss", "min", 4, ["i"])
    for i in range(12):
        p.add_trial(f"t{i:02d}", {"i": i})
        p.add_result(f"t{i:02d}", {"training_iteration": 1, "loss": float(i)})
        p.set_status(f"t{i:02d}", "TERMINATED" if i < 10 else "RUNNING")
    rows, hidden = p.select_rows(4)
    assert [r.trial_id for r in rows] == ["t00", "t01", "t10", "t11"]  # best, running, then the next best
    assert hidden == {"TERMINATED": 8}
    lines = p.text_table(max_rows=4).splitlines()
    assert len(lines) == 6 and lines[-1] == "... 8 more trials (8 TERMINATED)"
    assert lines[1].startswith("* t00")


def test_text_view_prints_throttled_and_once_at_the_end():
    clock = FakeClock(0.0)
    p = TuneProgress("loss", "min", 2, ["x"])
    out = io.StringIO()
    view = TuneTableText(p, stream=out, min_interval_s=5.0, clock=clock)
    view.display()
    p.add_trial("t0", {"x": 1})
    view.update()
    assert view.redraws == 1 and "== Tune running: 1 trial: 1 PENDING" in out.getvalue()
    view.update()  # nothing changed
    clock.t = 10.0
    view.update()  # time passed, but still nothing changed
    assert view.redraws == 1
    # 10,000 updates over 20 simulated seconds, a report before each: one table per 5 s.
    for i in range(10_000):
        clock.t = 10.0 + i * 0.002
        p.add_result("t0", {"training_iteration": i + 1, "loss": 1.0 / (i + 1)})
        view.update()
    assert view.redraws == 1 + 4, view.redraws
    p.note("ASHA: stopped t1")
    p.set_status("t0", "TERMINATED")
    view.finish()
    view.finish()  # once
    text = out.getvalue()
    assert view.redraws == 6
    assert text.count("== Tune finished:") == 1
    assert text.count("note: ASHA: stopped t1") == 1
    final = text.split("== Tune finished:")[1]
    assert "1 TERMINATED" in final and "* t0" in final and "0.0001" in final
    view.update()
    assert view.redraws == 6  # nothing after finish


# ------------------------------------------------------------------- the pane
@pytest.fixture
def shown(monkeypatch):
    """What the pane hands to IPython's display machinery."""
    calls = []

    class Handle:
        def update(self, obj):
            calls.append(("update", obj))

    def fake_display(obj, display_id=None):
        calls.append(("display", obj))
        return Handle() if display_id else None

    monkeypatch.setattr(widget_mod, "ipy_display", fake_display)
    return calls


def test_pane_widgets_show_the_table_plot_and_notes(shown):
    p = experiment("min")
    p.set_status("t3", "ERROR", error="ValueError: <bad> lr")
    p.note("PBT: t2 copies t1")
    pane = TuneTablePane(p, trailing=False, clock=FakeClock(0.0))
    pane.display()
    assert shown == [("display", pane.widget)]
    header, body, notes = pane.widget.children
    assert header is pane.header and notes is pane.notes
    assert list(body.children) == [pane.table, pane.plot]
    assert "1 RUNNING" in pane.header.value and "workers 1/2 in use" in pane.header.value
    assert re.search(
        r"best trial <b>t1</b> by last result: val_loss 0.2 <span[^>]*>\(min val_loss 0.2\)</span></div>$",
        pane.header.value,
    )
    table = pane.table.value
    for tid in ("t0", "t1", "t2", "t3"):
        assert f">{tid}<" in table
    # Best first, shaded and starred; then by val_loss.
    assert table.index("t1") < table.index("t0") < table.index("t2") < table.index("t3")
    best_row = table[table.rindex("<tr", 0, table.index("<b>t1</b>")) :]
    assert best_row.startswith('<tr style="background:#fff3c4') and "&#9733;" in best_row.split("</tr>")[0]
    assert table.count("&#9733;") == 1
    # Numbers right-aligned under right-aligned headers, missing values (t3) included.
    for col in ("lr", "iter", "time (s)", "val_loss", "min val_loss"):
        assert re.search(rf"text-align:right[^>]*>{re.escape(col)}</th>", table), col
    assert re.search(r"text-align:left[^>]*>status</th>", table)
    assert bytes(pane.plot.value).startswith(PNG_MAGIC) and pane.plot.layout.display is None
    assert "ValueError: &lt;bad&gt; lr" in pane.notes.value and "PBT: t2 copies t1" in pane.notes.value


def test_pane_finish_leaves_the_shown_rows_and_the_plot_in_static_html(shown):
    p = TuneProgress("loss", "max", 4, ["i"])
    for i in range(40):
        p.add_trial(f"trial_{i:03d}", {"i": i})
        p.add_result(f"trial_{i:03d}", {"training_iteration": 1, "loss": (i * 7) % 40})
        p.add_result(f"trial_{i:03d}", {"training_iteration": 2, "loss": (i * 7) % 40 + 0.5})
        p.set_status(f"trial_{i:03d}", "TERMINATED")
    pane = TuneTablePane(p, max_rows=10, trailing=False, clock=FakeClock(0.0))
    pane.display()
    assert pane.table.value.count("<tr") == 11 and "30 more trials" in pane.table.value
    pane.finish()
    kind, obj = shown[-1]
    assert kind == "update" and obj.data == pane.summary  # replaces the pane in place
    html = pane.summary
    # The live table's 10 rows (the best ten here), the other 30 counted: not every row.
    assert html.count("<tr") == 11 and "30 more trials" in html
    assert [i for i in range(40) if f">trial_{i:03d}<" in html] == sorted(
        i for i in range(40) if i * 7 % 40 >= 30
    )
    best = p.best_trial_id
    assert best == "trial_017"  # 17 * 7 % 40 == 39
    assert html.count("&#9733;") == 1 and f"<b>{best}</b>" in html
    assert "data:image/png;base64," in html and "<script" not in html
    assert pane.widget.comm is None and pane.table.comm is None  # widgets closed
    n = len(shown)
    pane.finish()
    pane.update()
    assert len(shown) == n


def test_pane_throttles_10000_updates():
    clock = FakeClock(0.0)
    p = TuneProgress("loss", "min", 2, ["x"])
    p.add_trial("t0", {"x": 1})
    pane = TuneTablePane(p, min_interval_s=0.25, plot_interval_s=1.0, trailing=False, clock=clock)
    redraws0, renders0 = pane.redraws, pane.plot_renders
    # 10,000 reports over 10 simulated seconds: at most 4 table redraws and 1 plot per second
    # (new results wait for their plot: one frame's table and curves agree).
    for i in range(10_000):
        clock.t = i * 0.001
        p.add_result("t0", {"training_iteration": i + 1, "loss": 1.0 / (i + 1)})
        pane.update()
    assert 9 <= pane.redraws - redraws0 <= 41, pane.redraws
    assert 9 <= pane.plot_renders - renders0 <= 11, pane.plot_renders
    # With the real clock: however long the loop takes, at most 4 redraws a second.
    real = TuneTablePane(p, trailing=False)
    start, before = time.monotonic(), real.redraws
    for i in range(10_000):
        p.add_result("t0", {"loss": 0.5})
        real.update()
    elapsed = time.monotonic() - start
    assert real.redraws - before <= elapsed / 0.25 + 1, (real.redraws, elapsed)
    for i in range(10_000):  # nothing changes: nothing is drawn
        real.update()
    assert real.redraws - before <= elapsed / 0.25 + 1


def test_pane_trailing_timer_draws_the_last_change(shown):
    p = TuneProgress("loss", "min", 1, [])
    p.add_trial("t0", {})
    pane = TuneTablePane(p, min_interval_s=0.2, plot_interval_s=0.2)
    p.add_result("t0", {"training_iteration": 1, "loss": 3.0})
    pane.update()
    p.add_result("t0", {"training_iteration": 2, "loss": 2.0})
    pane.update()  # throttled: the timer will draw it
    deadline = time.monotonic() + 5
    while ">2<" not in pane.table.value and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ">2<" in pane.table.value and bytes(pane.plot.value).startswith(PNG_MAGIC)
    pane.finish()


# ------------------------------------------------------------------- plot and choice
def test_plot_png_and_log_scale_for_decades():
    p = experiment("min")
    png = p.plot_png()
    assert png.startswith(PNG_MAGIC) and len(png) > 5000
    q = TuneProgress("loss", "min", 1, [])
    q.add_trial("a", {})
    assert q.plot_png() is None  # nothing reported yet
    for it, v in enumerate([10.0, 1.0, 0.01], 1):
        q.add_result("a", {"training_iteration": it, "loss": v})
    assert q.plot_png().startswith(PNG_MAGIC)


@pytest.mark.parametrize(
    "env, verbose, cls",
    [
        ("text", 1, TuneTableText),
        ("widget", 1, TuneTablePane),
        ("none", 1, NullTuneDisplay),
        ("widget", 0, NullTuneDisplay),
        ("text", 0, NullTuneDisplay),
    ],
)
def test_tune_display_choice(monkeypatch, env, verbose, cls):
    monkeypatch.setenv("RAYNB_PROGRESS", env)
    view = tune_display(TuneProgress("loss", "min", 1, []), verbose)
    assert type(view) is cls


def test_tune_display_auto_is_text_outside_a_kernel(monkeypatch, capsys):
    monkeypatch.delenv("RAYNB_PROGRESS", raising=False)
    p = TuneProgress("loss", "min", 1, [])
    view = tune_display(p, 1, min_interval_s=0.0)
    assert isinstance(view, TuneTableText)
    p.add_trial("t0", {"lr": 0.1})
    view.update()
    view.finish()
    out = capsys.readouterr().out
    assert "== Tune running: 1 trial: 1 PENDING" in out and "== Tune finished:" in out
    quiet = tune_display(TuneProgress("loss", "min", 1, []), 0)
    quiet.display(), quiet.update(), quiet.finish()
    assert capsys.readouterr().out == ""


def test_pane_header_elapsed_ticks_without_redraws():
    clock = FakeClock(0.0)
    p = TuneProgress("loss", "min", 1, [], clock=clock)
    p.add_trial("t0", {})
    pane = TuneTablePane(p, trailing=False, clock=clock)
    pane.update()
    redraws = pane.redraws
    assert "0.0s" in pane.header.value
    clock.t = 0.5
    pane.update()
    assert "0.0s" in pane.header.value  # under a second: not even the header
    clock.t = 7.25
    for _ in range(1000):
        pane.update()
    assert "7.2s" in pane.header.value and pane.redraws == redraws
    p.end()
    clock.t = 60.0
    pane.update()  # ended: elapsed frozen
    assert "7.2s" in pane.header.value
