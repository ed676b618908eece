"""The progress model, the ipywidgets pane (without a browser), the text view
and the choice between them."""

from __future__ import annotations

import io
import time

import pytest

from raynb.notebook import display as display_mod
from raynb.notebook.display import NullProgress, progress_display
from raynb.notebook.formatting import fmt_bytes, fmt_duration, fmt_range, fmt_value, render_curve_png
from raynb.notebook.run_pane import widget as widgets_mod
from raynb.notebook.run_pane.model import RunProgress
from raynb.notebook.run_pane.text import TextProgress
from raynb.notebook.run_pane.widget import ProgressPane

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MiB = 2**20
T0 = 1_700_000_000.0


class FakeClock:
    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def state(s, t, **kw):
    return {"kind": "state", "state": s, "time": t, **kw}


def report(rank, t, **metrics):
    return {"kind": "report", "rank": rank, "metrics": metrics, "time": t}


def stats(t, **workers):
    return {"kind": "stats", "workers": workers, "time": t}


def run_epochs(p_or_view, world=2, epochs=3, t=T0):
    """RUNNING, then one report per rank per epoch (as the head would send)."""
    feed = p_or_view.handle if hasattr(p_or_view, "handle") else p_or_view.on_event
    feed(state("RUNNING", t))
    for e in range(epochs):
        for r in range(world):
            feed(
                report(r, t + e + 1, epoch=e, loss=1.0 / (e + 1), acc=0.5 + 0.1 * e, training_iteration=e + 1)
            )


# ------------------------------------------------------------------- the model
def test_epoch_progress_against_total_and_silent_rank():
    p = RunProgress("r", world_size=3, total_epochs=10)
    run_epochs(p, world=2, epochs=3)
    assert p.rank_progress == {0: (3, 10), 1: (3, 10), 2: (0, 10)}
    assert p.progress_unit == "epoch"
    assert p.progress_text() == "epochs done 0-3/10"  # rank 2 never reported
    assert p.ranks == [0, 1, 2]


def test_step_and_iteration_progress_without_total():
    p = RunProgress("r", world_size=2)
    p.on_event(report(0, T0, step=41, loss=0.5))
    p.on_event(report(1, T0, loss=0.5))  # neither epoch nor step
    p.on_event(report(1, T0, loss=0.4))
    assert p.rank_progress == {0: (42, None), 1: (2, None)}
    # An epoch with no known total counts epochs rather than reports.
    q = RunProgress("r", world_size=1)
    q.on_event(report(0, T0, epoch=4, training_iteration=9))
    assert q.rank_progress == {0: (5, None)}
    assert q.progress_text() == "epochs done 5"


def test_latest_metrics_are_rank0_and_ignore_late_old_reports():
    p = RunProgress("r", world_size=2)
    p.on_event(report(1, T0, loss=9.0, training_iteration=1))
    assert p.latest_metrics == {}  # only rank 0 counts
    p.on_event(report(0, T0 + 2, loss=0.2, training_iteration=2, step=1))
    p.on_event(report(0, T0 + 1, loss=0.9, training_iteration=1, step=0))  # arrives late
    assert p.latest_metrics["loss"] == 0.2
    assert p.rank_progress[0] == (2, None)
    assert [x for x, _ in p.history] == [1, 2]
    assert p.loss_series() == ([1, 2], [0.9, 0.2])
    # The returned dict is a copy: editing it does not touch the model.
    p.latest_metrics["loss"] = 123
    assert p.latest_metrics["loss"] == 0.2


def test_loss_series_picks_first_present_key_and_skips_junk():
    p = RunProgress("r", world_size=1)
    for i, v in enumerate([1.0, "n/a", float("nan"), 0.5, None]):
        p.on_event(report(0, T0 + i, train_loss=v, val_loss=2.0, acc=0.1 * i, training_iteration=i + 1))
    assert p.loss_key() == "train_loss"
    assert p.loss_series() == ([1, 4], [1.0, 0.5])
    assert p.loss_series("acc")[0] == [1, 2, 3, 4, 5]
    # Nothing named like a loss and no usable key: empty series.
    q = RunProgress("r", world_size=1)
    q.on_event(report(0, T0, acc=0.3))
    assert q.loss_series() == ([], [])
    q2 = RunProgress("r", world_size=1)
    q2.on_event(report(0, T0, my_custom_loss=3.0))
    assert q2.loss_series() == ([1], [3.0])


def test_worker_stats_merge_convert_keys_and_ignore_stale_samples():
    p = RunProgress("r", world_size=2)
    p.on_event(stats(T0 + 1, **{"0": {"pid": 11, "cpu_percent": 50.0, "rss": 100 * MiB}}))
    p.on_event(stats(T0 + 1, **{"1": {"pid": 12, "cpu_percent": "bad", "rss": 300 * MiB}}))
    p.on_event(stats(T0 + 2, **{"0": {"pid": 11, "cpu_percent": 75.0, "rss": 80 * MiB}}))
    p.on_event(stats(T0 + 0.5, **{"0": {"pid": 99, "cpu_percent": 1.0, "rss": 1}}))  # stale
    ws = p.worker_stats
    assert ws[0] == {"pid": 11, "cpu_percent": 75.0, "rss": 80 * MiB}
    assert ws[1] == {"pid": 12, "cpu_percent": None, "rss": 300 * MiB}
    assert p.peak_rss == {0: 100 * MiB, 1: 300 * MiB}


def test_elapsed_ticks_while_running_and_freezes_at_end():
    clock = FakeClock(T0)
    p = RunProgress("r", world_size=1, clock=clock)
    p.on_event(state("PENDING", T0))
    clock.t = T0 + 5
    assert p.elapsed_s == 0.0  # not started yet
    p.on_event(state("RUNNING", T0 + 5))
    clock.t = T0 + 8
    assert p.elapsed_s == pytest.approx(3.0)
    p.on_event(state("FINISHED", T0 + 9))
    clock.t = T0 + 100
    assert p.elapsed_s == pytest.approx(4.0)
    assert p.finished
    # A late RUNNING or a second terminal state changes nothing.
    p.on_event(state("RUNNING", T0 + 50))
    p.on_event(state("FAILED", T0 + 60, message="late"))
    assert p.state == "FINISHED" and p.error is None
    assert p.elapsed_s == pytest.approx(4.0)


def test_report_before_running_starts_the_clock_and_failure_keeps_message():
    p = RunProgress("r", world_size=1)
    p.on_event(report(0, T0 + 2, loss=1.0))  # RUNNING state delayed or lost
    assert p.state == "RUNNING"
    p.on_event(state("RUNNING", T0 + 3))
    p.on_event(state("FAILED", T0 + 7, message="ZeroDivisionError: boom"))
    assert p.elapsed_s == pytest.approx(5.0)
    assert p.error == "ZeroDivisionError: boom"


def test_junk_events_are_ignored():
    p = RunProgress("r", world_size=2, total_epochs="nonsense")
    assert p.total_epochs is None
    junk = [
        None,
        42,
        "x",
        [],
        {},
        {"kind": "unknown"},
        {"kind": "state"},
        {"kind": "state", "state": "EXPLODED"},
        {"kind": "report"},
        {"kind": "report", "rank": "zero", "metrics": {"loss": 1}},
        {"kind": "report", "rank": 0, "metrics": "not a dict"},
        {"kind": "report", "rank": -1, "metrics": {}},
        {"kind": "report", "rank": True, "metrics": {}},
        {"kind": "report", "rank": 0, "metrics": {"epoch": "x", "step": None}, "time": "soon"},
        {"kind": "stats", "workers": None},
        {"kind": "stats", "workers": {"a": {}, "1": "no"}},
        {"kind": "output", "rank": 0, "text": None},
        {"kind": "note"},
    ]
    for ev in junk:
        p.on_event(ev)
    assert p.state == "RUNNING"  # from the one valid (if odd) report
    assert p.rank_progress == {0: (1, None), 1: (0, None)}
    assert p.worker_stats == {} and p.notes == []
    p.summary_html()  # and the summaries still render
    assert p.summary_lines()[0].startswith("[r] RUNNING")


def test_notes_restarts_and_output_tail():
    p = RunProgress("r", world_size=1)
    p.on_event({"kind": "note", "text": "restart 1/3: rank 2 died, SIGKILL", "time": T0})
    p.on_event({"kind": "note", "text": "checkpoint restored", "time": T0})
    p.on_event({"kind": "output", "rank": 0, "stream": "stdout", "text": "a\nb\n\n"})
    p.on_event(
        {"kind": "output", "rank": 0, "stream": "stderr", "text": "\n".join(str(i) for i in range(50))}
    )
    assert p.notes == ["restart 1/3: rank 2 died, SIGKILL", "checkpoint restored"]
    assert p.restarts == 1
    tail = p.output_tail[0]
    assert len(tail) == 20 and tail[-1] == "49"


def test_summary_html_is_static_escaped_and_has_the_plot():
    p = RunProgress("<script>alert(1)</script>", world_size=2, total_epochs=3)
    run_epochs(p, world=2, epochs=3)
    p.on_event(stats(T0 + 2, **{"0": {"pid": 4242, "cpu_percent": 90.0, "rss": 512 * MiB}}))
    p.on_event(state("FINISHED", T0 + 4))
    out = p.summary_html()
    assert "<script>" not in out and "&lt;script&gt;" in out
    assert "FINISHED" in out and "4.0s" in out
    assert "0.3333" in out and "0.7" in out  # final loss and acc
    assert "3/3" in out and "4242" in out and "512 MiB" in out
    assert "data:image/png;base64," in out
    assert "data:image" not in p.summary_html(plot=False)
    lines = p.summary_lines()
    assert lines[0].endswith("FINISHED in 4.0s | epochs done 3/3")
    assert "loss=0.3333" in lines[1] and "acc=0.7" in lines[1]


def test_formatters():
    assert fmt_bytes(180 * MiB) == "180 MiB" and fmt_bytes(3 * 2**30) == "3.0 GiB"
    assert fmt_bytes(None) == "?"
    assert fmt_duration(12.34) == "12.3s" and fmt_duration(245) == "4m 05s"
    assert fmt_duration(3723) == "1h 02m 03s" and fmt_duration(-1) == "0.0s"


def test_value_and_range_formatters():
    assert fmt_value(0.023467) == "0.02347" and fmt_value(14) == "14"
    assert fmt_value(12345.6) == "12346"  # not 1.235e+04
    assert fmt_value(1.2e-7) == "1.2e-07" and fmt_value(3e13) == "3e+13"
    assert fmt_range([257 * MiB] * 4, fmt_bytes) == "257 MiB"
    assert fmt_range([262 * MiB, 250 * MiB, None], fmt_bytes) == "250-262 MiB"
    assert fmt_range([250 * MiB, 2**31], fmt_bytes) == "250 MiB-2.0 GiB"
    assert fmt_range([28.0, 20.2], lambda c: f"{c:.0f}%") == "20-28%"
    assert fmt_range([None], fmt_bytes) == "?"


def test_curve_needs_two_points():
    assert render_curve_png([1], [0.5]) is None  # one point is no curve
    assert render_curve_png([1, 2], [2.3, 0.001]).startswith(PNG_MAGIC)  # log axis


def finished_run(world=4, epochs=15):
    """A finished run shaped like the quickstart's: the head adds timestamp and
    the time_* keys to every row."""
    p = RunProgress("quick", world_size=world, total_epochs=epochs)
    p.on_event(state("RUNNING", T0))
    for e in range(epochs):
        for r in range(world):
            p.on_event(
                report(
                    r,
                    T0 + e,
                    epoch=e,
                    loss=2.2 / (e + 1) ** 2,
                    val_accuracy=0.5 + e / 40,
                    training_iteration=e + 1,
                    timestamp=T0 + e,
                    time_total_s=0.3 * (e + 1),
                    time_this_iter_s=0.3,
                )
            )
    p.on_event(
        stats(
            T0 + 2,
            **{str(r): {"pid": 100 + r, "cpu_percent": 90.0, "rss": (270 + r) * MiB} for r in range(world)},
        )
    )
    p.on_event(state("FINISHED", T0 + 16))
    return p


def test_summary_html_layout_survives_notebook_table_css():
    out = finished_run().summary_html()
    # Every cell is styled inline: JupyterLab and nbconvert right-align, pad and
    # stripe bare table cells, which spread a summary over a screen.
    assert "<td>" not in out and "<th>" not in out and "<tr>" not in out
    assert "text-align:left" in out and "background:none" in out
    # The wall-clock timestamp is noise (1.796e+09); bookkeeping sits on a muted line.
    assert "timestamp" not in out and "1.7" + "e+09" not in out
    assert "time_total_s 4.5" in out and "training_iteration 15" in out
    assert ">val_accuracy<" in out and ">0.85<" in out
    # One row per rank: bar (green: finished), progress, pid and peak RSS together.
    assert out.count("15/15 epochs") == 4 and ">103<" in out and "273 MiB" in out
    assert "#43a047" in out
    assert 'width="360"' in out  # drawn at 2x, shown at 360px


def test_failed_without_message_shows_no_empty_error():
    p = RunProgress("f", world_size=1)
    p.on_event(state("RUNNING", T0))
    p.on_event(state("FAILED", T0 + 1))
    assert p.error == "failed" and p.error_text is None
    assert not any("error" in line for line in p.summary_lines())
    assert "<pre" not in p.summary_html()
    q = RunProgress("f", world_size=1)
    q.on_event(state("FAILED", T0 + 1, message="rank 2 raised ValueError"))
    assert q.error_text == "rank 2 raised ValueError"
    assert "  error: rank 2 raised ValueError" in q.summary_lines()
    assert "rank 2 raised ValueError</pre>" in q.summary_html()


def test_summary_lines_are_short_for_many_ranks():
    lines = finished_run(world=16).summary_lines()
    assert lines[1].startswith("  metrics: loss=") and "timestamp" not in lines[1]
    assert lines[2] == "  workers: 16 ranks, peak RSS 270-285 MiB (highest rank15)"


# ------------------------------------------------------------------- the pane
@pytest.fixture
def shown(monkeypatch):
    """Capture what the pane hands to IPython's display machinery."""
    calls = []

    class Handle:
        def update(self, obj):
            calls.append(("update", obj))

    def fake_display(obj, display_id=None):
        calls.append(("display", obj))
        return Handle() if display_id else None

    monkeypatch.setattr(widgets_mod, "ipy_display", fake_display)
    return calls


def test_pane_widgets_follow_the_model(shown):
    clock = FakeClock(0.0)
    p = RunProgress("mnist", world_size=3, total_epochs=4)
    pane = ProgressPane(p, min_interval_s=0.25, trailing=False, clock=clock)
    pane.display()
    assert shown[0] == ("display", pane.widget)
    assert "PENDING" in pane.header.value and "mnist" in pane.header.value
    run_epochs(pane, world=2, epochs=2)
    pane.handle(stats(T0 + 1, **{"0": {"pid": 7, "cpu_percent": 52.4, "rss": 180 * MiB}}))
    clock.t = 1.0  # past the throttle
    assert pane.refresh()
    assert "RUNNING" in pane.header.value and "epochs done 0-2/4" in pane.header.value
    assert [(pane.bars[r].value, pane.bars[r].max) for r in range(3)] == [(2, 4), (2, 4), (0, 4)]
    assert "0.5" in pane.metrics_html.value and "acc" in pane.metrics_html.value
    assert bytes(pane.plot.value).startswith(PNG_MAGIC)
    assert "52%" in pane.stats_html.value and "180 MiB" in pane.stats_html.value
    # A rank outside world_size gets a bar of its own.
    pane.handle(report(5, T0 + 3, epoch=0))
    clock.t = 2.0
    pane.refresh()
    assert pane.bars[5].value == 1 and len(pane.bars_box.children) == 4


def test_pane_bars_without_total_count_instead_of_filling():
    # Scaled to the furthest rank, step 10 of 240 looked complete (issue 9, item 17):
    # with no total the bars stay empty and the labels count, until the run FINISHED.
    p = RunProgress("r", world_size=2)
    pane = ProgressPane(p, trailing=False, clock=FakeClock(0.0))
    p.on_event(report(0, T0, step=99))
    p.on_event(report(1, T0, step=49))
    pane.refresh(force=True)
    assert [(pane.bars[r].value, pane.bars[r].max) for r in (0, 1)] == [(0, 1), (0, 1)]
    assert pane._bar_labels[0].value.startswith("100 steps (no total)")
    assert pane._bar_labels[1].value.startswith("50 steps (no total)")
    p.on_event(state("FINISHED", T0 + 1))
    pane.refresh(force=True)
    assert [pane.bars[r].value for r in (0, 1)] == [1, 1] and pane._bar_labels[0].value == "100 steps"


def test_pane_throttles_refreshes_and_plot_renders():
    clock = FakeClock(0.0)
    p = RunProgress("r", world_size=1)
    pane = ProgressPane(p, min_interval_s=0.25, trailing=False, clock=clock)
    pane.handle(state("RUNNING", T0))
    renders0, refreshes0 = pane.plot_renders, pane.refreshes
    for i in range(100):  # a tight loop: the clock barely moves
        clock.t += 0.001
        pane.handle(report(0, T0 + i, loss=1.0 / (i + 1)))
    assert pane.plot_renders - renders0 <= 1
    assert pane.refreshes - refreshes0 <= 1
    # Over 2 s of simulated time at 4 refreshes/s: about 8 renders, not 100.
    for i in range(100, 200):
        clock.t += 0.02
        pane.handle(report(0, T0 + i, loss=1.0 / (i + 1)))
    assert 5 <= pane.plot_renders - renders0 <= 10
    # A state change shows at once, however recent the last refresh.
    pane.handle(state("FAILED", T0 + 300, message="boom"))
    assert "FAILED" in pane.header.value and "boom" in pane.notes_html.value
    assert pane.bars[0].bar_style == "danger"


def test_pane_trailing_refresh_catches_the_last_event():
    p = RunProgress("r", world_size=1, total_epochs=2)
    pane = ProgressPane(p, min_interval_s=1.0)
    pane.handle(state("RUNNING", T0))
    pane.handle(report(0, T0, epoch=1, loss=0.1))  # throttled right after the state refresh
    assert pane.bars[0].value == 0
    deadline = time.monotonic() + 5
    while pane.bars[0].value != 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pane.bars[0].value == 2
    pane.finish()


def test_pane_finish_leaves_static_summary_in_place(shown):
    p = RunProgress("final", world_size=2, total_epochs=3)
    pane = ProgressPane(p, trailing=False, clock=FakeClock(0.0))
    pane.display()
    run_epochs(pane, world=2, epochs=3)
    pane.handle(state("FINISHED", T0 + 4))
    pane.finish()
    kind, obj = shown[-1]
    assert kind == "update"  # replaces the pane, not appended below it
    assert obj.data == pane.summary
    assert "FINISHED" in obj.data and "0.3333" in obj.data and "0.7" in obj.data
    assert pane.widget.comm is None and pane.plot.comm is None  # widgets closed
    assert all(b.comm is None for b in pane.bars.values())
    n = len(shown)
    pane.finish()  # idempotent
    pane.handle(report(0, T0 + 9, loss=5.0))  # late events don't touch closed widgets
    assert len(shown) == n
    assert p.latest_metrics["loss"] == 5.0


def test_pane_finish_without_display_appends_summary(shown):
    p = RunProgress("nodisplay", world_size=1)
    pane = ProgressPane(p, trailing=False)
    pane.handle(state("CANCELLED", T0))
    pane.finish()
    assert shown[-1][0] == "display" and "CANCELLED" in shown[-1][1].data


def test_pane_rank_rows_carry_their_worker_stats():
    p = RunProgress("r", world_size=2, total_epochs=4)
    pane = ProgressPane(p, trailing=False, clock=FakeClock(0.0))
    run_epochs(pane, world=2, epochs=1)
    pane.handle(
        stats(
            T0 + 1,
            **{
                "0": {"pid": 7, "cpu_percent": 52.4, "rss": 180 * MiB},
                "1": {"pid": 8, "cpu_percent": 40.0, "rss": 200 * MiB},
            },
        )
    )
    pane.refresh(force=True)
    assert "1/4 epochs" in pane._bar_labels[0].value and "52% CPU" in pane._bar_labels[0].value
    assert "200 MiB" in pane._bar_labels[1].value
    assert "2 workers" in pane.stats_html.value and "CPU 92%" in pane.stats_html.value
    assert "380 MiB" in pane.stats_html.value
    # No bare cells for the notebook's table CSS to spread out; no timestamp.
    assert "<td>" not in pane.metrics_html.value and "timestamp" not in pane.metrics_html.value


def test_pane_scrolls_many_ranks_instead_of_growing():
    p = RunProgress("r", world_size=4)
    pane = ProgressPane(p, trailing=False)
    assert pane.bars_box.layout.max_height is None
    q = RunProgress("r", world_size=32)
    big = ProgressPane(q, trailing=False)
    assert len(big.bars) == 32
    assert big.bars_box.layout.max_height and big.bars_box.layout.overflow == "auto"
    assert all(row.layout.flex == "0 0 auto" for row in big.bars_box.children)


def test_pane_forced_refresh_draws_the_reports_its_table_shows():
    # A forced refresh (a note, a state) right after a render once left the curve to a
    # trailing refresh while the table beside it moved on: curve and table disagreed.
    clock = FakeClock(0.0)
    p = RunProgress("r", world_size=1)
    pane = ProgressPane(p, min_interval_s=0.25, trailing=False, clock=clock)
    for i in range(3):
        p.on_event(report(0, T0 + i, loss=1.0 / (i + 1)))
    clock.t = 1.0
    assert pane.refresh() and pane.plot_renders == 1
    p.on_event(report(0, T0 + 3, loss=0.2))
    clock.t = 1.05
    pane.handle({"kind": "note", "text": "checkpoint saved", "time": T0})  # forced
    assert "checkpoint saved" in pane.notes_html.value
    assert pane.plot_renders == 2 and bytes(pane.plot.value) == render_curve_png(*p.loss_series(), "loss")
    clock.t = 1.3
    assert pane.refresh() and pane.plot_renders == 2  # nothing new: no second draw


def test_pane_finish_renders_the_final_curve_once_for_pane_and_summary():
    # The last frame shows the final curve (issue 9, item 17), drawn once: the summary
    # that replaces the pane reuses it.
    import base64

    p = RunProgress("r", world_size=1)
    pane = ProgressPane(p, trailing=False, clock=FakeClock(0.0))
    for i in range(3):
        p.on_event(report(0, T0 + i, loss=1.0 / (i + 1)))
    pane.finish()
    assert pane.plot_renders == 1 and bytes(pane.plot.value).startswith(PNG_MAGIC)
    assert base64.b64encode(bytes(pane.plot.value)).decode() in pane.summary


# ------------------------------------------------------------------- text view
def test_text_progress_lines():
    clock = FakeClock(0.0)
    out = io.StringIO()
    p = RunProgress("txt", world_size=2, total_epochs=10, clock=lambda: T0 + 12.3)
    tp = TextProgress(p, stream=out, min_interval_s=2.0, clock=clock)
    tp.display()
    tp.handle(state("RUNNING", T0))
    tp.handle(stats(T0, **{"0": {"pid": 1, "cpu_percent": 52.0, "rss": 180 * MiB}}))
    for e in range(3):  # within 2 s: one status line at most
        for r in range(2):
            clock.t += 0.1
            tp.handle(report(r, T0 + e, epoch=e, loss=0.231, val_acc=0.95, training_iteration=e + 1))
    clock.t += 5
    tp.handle(stats(T0 + 5, **{"0": {"pid": 1, "cpu_percent": 52.0, "rss": 180 * MiB}}))
    tp.handle({"kind": "note", "text": "restart 1/3: rank 1 died", "time": T0 + 6})
    clock.t += 5
    tp.handle(stats(T0 + 7, **{"0": {"pid": 1, "cpu_percent": 52.0, "rss": 180 * MiB}}))  # nothing new
    tp.handle(state("FINISHED", T0 + 20))
    tp.finish()
    tp.finish()
    lines = out.getvalue().splitlines()
    assert lines[0] == "[txt] RUNNING"
    status = [line for line in lines if line.startswith("[txt] RUNNING 12.3s")]
    assert len(status) == 2, lines
    assert (
        status[-1] == "[txt] RUNNING 12.3s | epochs done 3/10 | loss=0.231 val_acc=0.95 | rank0 52% 180 MiB"
    )
    assert "[txt] note: restart 1/3: rank 1 died" in lines
    # One FINISHED line: the summary's first (a terminal printed "FINISHED after" too).
    assert [line for line in lines if line.startswith("[txt] FINISHED")] == [p.summary_lines()[0]], lines
    assert lines[-3:] == p.summary_lines()[-3:]


def test_text_progress_quiet_heartbeat():
    clock = FakeClock(0.0)
    out = io.StringIO()
    p = RunProgress("q", world_size=1)
    tp = TextProgress(p, stream=out, min_interval_s=1.0, quiet_s=10.0, clock=clock)
    tp.handle(report(0, T0, loss=1.0))
    assert tp.lines_printed == 1
    clock.t = 5
    tp.handle(stats(T0, **{"0": {"pid": 1, "cpu_percent": 1.0, "rss": MiB}}))
    assert tp.lines_printed == 1  # no new report, not quiet for long
    clock.t = 11
    tp.handle(stats(T0, **{"0": {"pid": 1, "cpu_percent": 1.0, "rss": MiB}}))
    assert tp.lines_printed == 2


def test_text_status_line_stays_short_for_many_ranks():
    clock = FakeClock(0.0)
    out = io.StringIO()
    p = RunProgress("big", world_size=8, total_epochs=5, clock=lambda: T0 + 3)
    tp = TextProgress(p, stream=out, clock=clock)
    tp.handle(state("RUNNING", T0))
    tp.handle(
        stats(T0, **{str(r): {"pid": r, "cpu_percent": 20.0 + r, "rss": (250 + r) * MiB} for r in range(8)})
    )
    assert out.getvalue().splitlines() == ["[big] RUNNING"]  # a sample alone is no news
    for r in (3, 1):  # other ranks first: no line without rank 0's metrics
        tp.handle(report(r, T0 + 1, epoch=0, loss=0.9))
    assert len(out.getvalue().splitlines()) == 1
    tp.handle(report(0, T0 + 1, epoch=0, loss=0.9, timestamp=T0))
    assert out.getvalue().splitlines()[-1] == (
        "[big] RUNNING 3.0s | epochs done 0-1/5 | loss=0.9 | 8 ranks 20-27% 250-257 MiB"
    )


# ------------------------------------------------------------------- choosing a view
@pytest.mark.parametrize(
    "env, cls", [("text", TextProgress), ("widget", ProgressPane), ("none", NullProgress)]
)
def test_env_override(monkeypatch, env, cls):
    monkeypatch.setenv("RAYNB_PROGRESS", env)
    view = progress_display(RunProgress("r", 1))
    assert type(view) is cls
    view.handle(report(0, T0, loss=0.5))  # every view feeds the model
    assert view.progress.latest_metrics == {"loss": 0.5}


def test_auto_choice_follows_the_kernel(monkeypatch):
    monkeypatch.delenv("RAYNB_PROGRESS", raising=False)
    assert not display_mod.in_jupyter_kernel()  # pytest is not a Jupyter kernel
    assert isinstance(progress_display(RunProgress("r", 1)), TextProgress)
    monkeypatch.setattr(display_mod, "in_jupyter_kernel", lambda: True)
    view = progress_display(RunProgress("r", 1), min_interval_s=0.5)
    assert isinstance(view, ProgressPane) and view.min_interval_s == 0.5
    monkeypatch.setenv("RAYNB_PROGRESS", "bogus")
    with pytest.warns(UserWarning):
        assert isinstance(progress_display(RunProgress("r", 1)), ProgressPane)
