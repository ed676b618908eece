"""The trial table's live redraw reads only what it shows: with thousands of trials it
snapshots no more rows than it draws, and its order and counts match a full sort."""

from __future__ import annotations

import random

from raynb.notebook.trial_table import model as trial_table
from raynb.notebook.trial_table.model import STATUSES, TuneProgress


def _filled(n: int, seed: int = 0) -> TuneProgress:
    rnd = random.Random(seed)
    p = TuneProgress("acc", "max", 4)
    for i in range(n):
        p.add_trial(f"t{i:05d}", {"lr": rnd.random()})
    for _ in range(3 * n):
        tid = f"t{rnd.randrange(n):05d}"
        r = rnd.random()
        if r < 0.5:
            p.add_result(tid, {"acc": round(rnd.random(), 2)})  # ties: order breaks them
        else:
            p.set_status(tid, rnd.choice(["RUNNING", "TERMINATED", "ERROR", "PAUSED"]), error="x")
    return p


def _brute_rows(p: TuneProgress):
    rows = [r.snapshot() for r in p._trials.values()]
    return sorted(rows, key=lambda r: (r.latest is None, -r.latest if r.latest is not None else 0.0, r.order))


def test_order_counts_best_and_selection_match_a_full_sort():
    p = _filled(500)
    brute = _brute_rows(p)
    assert [r.trial_id for r in p.rows()] == [r.trial_id for r in brute]
    assert p.best_trial_id == brute[0].trial_id
    statuses = [r.status for r in brute]
    assert p.counts == {s: statuses.count(s) for s in STATUSES if s in statuses}
    assert p.errors == [
        (r.trial_id, "x") for r in sorted(brute, key=lambda r: r.order) if r.status == "ERROR"
    ]

    shown, hidden = p.select_rows(30)
    chosen = [brute[0].trial_id] + [r.trial_id for r in brute if r.status == "RUNNING"]
    chosen += [r.trial_id for r in brute]
    want = list(dict.fromkeys(chosen))[:30]
    assert [r.trial_id for r in shown] == [r.trial_id for r in brute if r.trial_id in set(want)]
    rest = [r.status for r in brute if r.trial_id not in set(want)]
    assert hidden == {s: rest.count(s) for s in STATUSES if s in rest}


def test_a_redraw_with_5000_trials_snapshots_only_the_rows_it_shows(monkeypatch):
    p = _filled(5000)
    taken = []
    real = trial_table.TrialRow.snapshot
    monkeypatch.setattr(trial_table.TrialRow, "snapshot", lambda self: taken.append(1) or real(self))
    p.add_result("t00007", {"acc": 0.5})
    p.header_html(), p.html_table(30), p.text_table(20), p.status_line(), p.errors_html()
    assert len(taken) == 50, len(taken)  # 30 for the HTML table, 20 for the text one


def test_the_plot_of_2000_one_report_trials_draws_them_as_one_scatter(monkeypatch):
    from matplotlib.axes import Axes

    p = TuneProgress("acc", "max", 2)
    for i in range(2000):
        p.add_trial(f"t{i}", {})
        p.add_result(f"t{i}", {"acc": i / 2000})
        p.set_status(f"t{i}", "TERMINATED")
    calls = {"plot": 0, "scatter": 0}
    for name in calls:
        real = getattr(Axes, name)

        def counted(self, *a, _name=name, _real=real, **k):
            calls[_name] += 1
            return _real(self, *a, **k)

        monkeypatch.setattr(Axes, name, counted)
    png = p.plot_png()
    assert png and png.startswith(b"\x89PNG")
    assert calls == {"plot": 1, "scatter": 1}, calls  # the best trial's line, everyone else's points
