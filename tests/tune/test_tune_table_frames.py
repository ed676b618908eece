"""The live trial table's frames: the table, the header and the curves of one frame come
from one snapshot of the trials (the ★ row is the legend's best, the best curve is not
behind the table's iter), the legend sits outside the axes, and the header names the
scope of its 'best'."""

from __future__ import annotations

from raynb.notebook.trial_table.model import TuneProgress
from raynb.notebook.trial_table.render import plot_figure
from raynb.notebook.trial_table.widget import TuneTablePane


class FakeClock:
    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _events():
    """Two trials whose lead changes hands every few reports (mode max)."""
    out = []
    for it in range(1, 13):
        out.append(("a", {"training_iteration": it, "acc": 0.5 + 0.02 * it}))
        out.append(
            ("b", {"training_iteration": it, "acc": 0.5 + 0.02 * it + (0.03 if it % 4 < 2 else -0.03)})
        )
    return out


def _model():
    p = TuneProgress("acc", "max", 2, ["lr"], clock=lambda: 0.0)
    p.add_trial("a", {"lr": 0.1})
    p.add_trial("b", {"lr": 0.2})
    return p


def test_every_frame_draws_its_table_and_curves_from_one_snapshot():
    events = _events()
    ref = _model()
    tables, pngs = [ref.html_table(30)], [ref.plot_png()]
    for tid, metrics in events:  # what each prefix of the events draws
        ref.add_result(tid, metrics)
        tables.append(ref.html_table(30))
        pngs.append(ref.plot_png())
    clock = FakeClock(0.0)
    p = _model()
    pane = TuneTablePane(p, min_interval_s=0.25, plot_interval_s=1.0, trailing=False, clock=clock)
    disagreements = []
    for k, (tid, metrics) in enumerate(events, start=1):
        clock.t += 0.3
        p.add_result(tid, metrics)
        pane.update()
        j = tables.index(pane.table.value)
        if (pngs[j] or b"") != bytes(pane.plot.value):  # the curves of another moment than the table's
            disagreements.append((k, j))
    assert not disagreements, disagreements
    assert pane.plot_renders > 3  # the frames did move on


def test_legend_sits_outside_the_axes():
    p = _model()
    for tid, metrics in _events():
        p.add_result(tid, metrics)
    p.set_status("a", "STOPPED")
    fig = plot_figure(p)
    fig.canvas.draw()
    ax = fig.axes[0]
    legend, box = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert not legend.overlaps(box), (legend, box)
    assert legend.y0 >= box.y1 - 1 and legend.y1 <= fig.bbox.y1 + 1  # above the axes, in the image


def test_header_names_the_scope_of_its_best_value():
    # 'best ... 0.9694' went down during a run next to a 'max' column of 0.9722.
    p = TuneProgress("val_accuracy", "max", 1, ["lr"])
    p.add_trial("t0", {"lr": 0.1})
    for it, acc in enumerate((0.9722, 0.9694), start=1):
        p.add_result("t0", {"training_iteration": it, "val_accuracy": acc})
    for text in (p.status_line(), p.header_html()):
        assert "by last result" in text
        assert "val_accuracy 0.9694" in text and "max val_accuracy 0.9722" in text
