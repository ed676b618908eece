"""The summary a finished sweep leaves in the notebook shows the rows the live table
showed (the best trial, the RUNNING ones, then the best of the rest), whatever the
number of trials; the rest are counted by status."""

from __future__ import annotations

import re

from raynb.notebook.trial_table import widget as widget_mod
from raynb.notebook.trial_table.model import TuneProgress
from raynb.notebook.trial_table.widget import TuneTablePane


def _sweep(n: int) -> TuneProgress:
    p = TuneProgress("acc", "max", 2, ["i"])
    for i in range(n):
        tid = f"t{i:05d}"
        p.add_trial(tid, {"i": i})
        p.add_result(tid, {"training_iteration": 1, "acc": (i * 7919) % n / n})
        p.set_status(
            tid, "ERROR" if i == 3 else "RUNNING" if i in (5, 9) else "TERMINATED", "boom" if i == 3 else None
        )
    return p


def test_the_summary_shows_the_live_tables_rows_and_counts_the_rest(monkeypatch):
    monkeypatch.setattr(widget_mod, "ipy_display", lambda obj, display_id=None: None)
    p = _sweep(5000)
    pane = TuneTablePane(p, max_rows=12, trailing=False)
    want, hidden = p.select_rows(12)
    pane.finish()
    html = pane.summary
    shown = re.findall(r">(?:<b>)?(t\d{5})(?:</b>)?</td>", html)
    assert shown == [r.trial_id for r in want]  # the same rows, in the table's order
    assert {"t00005", "t00009", p.best_trial_id} <= set(shown)  # RUNNING and best first
    assert sum(hidden.values()) == 5000 - 12 and f"{5000 - 12} more trials" in html
    assert html.count("&#9733;") == 1 and "boom" in html  # the error is listed under it
    assert len(html) < 200_000  # not a row per trial (a PNG of the curves is most of it)


def test_the_models_summary_can_still_have_every_row():
    p = _sweep(40)
    every = p.summary_html(plot=False, max_rows=None)
    assert all(f">t{i:05d}<" in every or f"<b>t{i:05d}</b>" in every for i in range(40))
    assert "more trials" not in every
    assert p.summary_html(plot=False).count("<tr") == 31  # by default the live table's 30
