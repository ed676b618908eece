"""The training pane's frames agree with themselves: the last live frame shows the final
reports (curve and table), the loss axis keeps its scale, the pane keeps its height,
the log view never says 'no output yet' when something was printed, and the header's
progress counts what is done."""

from __future__ import annotations

import re

from raynb.notebook.formatting import PLOT_HEIGHT_PX, fmt_value, render_curve_png
from raynb.notebook.run_pane.log_view import LogView
from raynb.notebook.run_pane.model import RunProgress
from raynb.notebook.run_pane.widget import ProgressPane

T0 = 1_700_000_000.0


def report(rank, t, **metrics):
    return {"kind": "report", "rank": rank, "metrics": metrics, "time": t}


def state(s, t):
    return {"kind": "state", "state": s, "time": t}


def test_last_live_frame_shows_every_point_and_the_tables_loss():
    # The end came within the throttle's interval of the last curve: the last live frame
    # drew 12 of 15 points and its title's loss was not the table's.
    now = [0.0]
    p = RunProgress("r", world_size=1, total_epochs=15)
    pane = ProgressPane(p, min_interval_s=1.0, trailing=False, clock=lambda: now[0])
    pane.handle(state("RUNNING", T0))
    for epoch in range(15):
        now[0] += 1.1 if epoch < 12 else 0.01
        pane.handle(report(0, T0 + epoch, epoch=epoch, loss=1.0 / (epoch + 2), training_iteration=epoch + 1))
    pane.handle(state("FINISHED", T0 + 16))  # the last live frame, before finish()
    xs, ys = p.loss_series()
    assert len(xs) == 15
    assert bytes(pane.plot.value) == render_curve_png(xs, ys, "loss", log_y=pane.log_y)
    assert f">{fmt_value(ys[-1])}<" in pane.metrics_html.value
    pane.finish()


def test_loss_axis_keeps_the_scale_of_its_first_draw():
    # A loss that falls past two decades mid-run switched the axis from linear to log.
    now = [0.0]
    p = RunProgress("r", world_size=1)
    pane = ProgressPane(p, min_interval_s=0.0, trailing=False, clock=lambda: now[0])
    losses = [2.0, 1.5, 1.0, 0.3, 0.05, 0.01, 0.004]
    for i, loss in enumerate(losses):
        now[0] += 1
        pane.handle(report(0, T0 + i, loss=loss, training_iteration=i + 1))
    assert pane.log_y is False
    linear = render_curve_png(list(range(1, 8)), losses, "loss", log_y=False)
    assert bytes(pane.plot.value) == linear
    assert linear != render_curve_png(list(range(1, 8)), losses, "loss")  # auto would pick log
    pane.finish()
    assert bytes(pane.plot.value) == linear  # the final frame too


def test_pane_reserves_the_curve_and_a_fixed_log_height():
    p = RunProgress("r", world_size=2)
    pane = ProgressPane(p, trailing=False)
    assert pane.plot_box.layout.min_height == f"{PLOT_HEIGHT_PX}px"
    pane.handle({"kind": "output", "rank": 0, "stream": "stdout", "text": "hello\n"})
    text = pane.log_view.text.value
    assert re.search(r"[^-]height:\d+em", text) and "max-height" not in text
    pane.finish()


def test_log_view_shows_other_ranks_output_rather_than_no_output_yet():
    # Only rank 1 printed: the default view (rank 0) said 'no output yet' above the
    # cell's printed output.
    view = LogView(world_size=2, trailing=False)
    view.handle({"kind": "output", "rank": 1, "stream": "stdout", "text": "from one\n"})
    assert "no output yet" not in view.text.value
    assert "(rank 1) from one" in view.text.value and "rank 0 printed nothing yet" in view.text.value
    view.handle({"kind": "output", "rank": 0, "stream": "stdout", "text": "\n"})  # a blank line
    view.refresh(force=True)
    assert "no output yet" not in view.text.value
    view.close()


def test_header_counts_epochs_done_as_the_metric_line_counts_from_zero():
    # 'epoch 6/40' in the header over 'epoch 5' in the metrics read as two epochs.
    p = RunProgress("r", world_size=1, total_epochs=40)
    pane = ProgressPane(p, trailing=False)
    pane.handle(state("RUNNING", T0))
    pane.handle(report(0, T0 + 1, epoch=5, loss=0.5))
    pane.refresh(force=True)
    assert "epochs done 6/40" in pane.header.value
    assert "epoch 6/40" not in pane.header.value
    pane.finish()
