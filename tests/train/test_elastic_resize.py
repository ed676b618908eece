"""Elastic resizes: a grow stops the ranks inside ``report()`` at a committed checkpoint
(the head's ``report_gate``), each resize is a note with its cause and time, a run with
no checkpoint is warned once, and a restored elastic run stays elastic.
"""

from __future__ import annotations

import sys

import cloudpickle

from raynb.cluster.head.elastic import GrowMonitor
from raynb.cluster.head.scheduler import NodeView, Snapshot, WorkerView

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- the report gate (no process) ---------------------------------------------------
class _Registry:
    def snapshot(self):  # the run's own w0, w1 busy, two more idle
        workers = tuple(WorkerView(f"w{i}", "local", busy=i < 2) for i in range(4))
        return Snapshot(nodes=(NodeView("local", 4, 0, num_workers=4),), workers=workers)


def _gated_monitor(tmp_path):
    from support.controller_harness import Clock, Harness

    h, clock, resized, gates = Harness(tmp_path), Clock(), [], []
    monitor = GrowMonitor(
        _Registry(),
        lambda run, at_report=False: resized.append(at_report),
        lambda run, e: None,
        clock,
        gate=lambda run, content: gates.append(content),
    )
    run = h.running(world_size=4, min_workers=1, elastic_resize_monitor_interval_s=10)
    run.ranks = ["w0", "w1"]
    monitor(run)
    clock.t += 11
    monitor(run)  # room for 4: marked, and the ranks told to hold at their reports
    assert gates == [{"gate": True}] and "_grow" in run.spec
    return monitor, run, resized, gates, clock


def test_held_ranks_go_on_at_a_report_without_a_checkpoint(tmp_path):
    monitor, run, resized, gates, _ = _gated_monitor(tmp_path)
    monitor.held(run, 0, 5)
    run.report_counts = {0: 5, 1: 4}
    monitor.on_report(run, 5, committed=False)
    assert gates[1:] == [] and not resized  # rank 1 has not made report 5: rank 0 holds
    monitor.held(run, 1, 5)
    run.report_counts = {0: 5, 1: 5}
    monitor.on_report(run, 5, committed=False)
    assert gates[1:] == [{"gate": True, "index": 5, "stop": False}] and not resized


def test_held_ranks_stop_at_the_report_that_committed_a_checkpoint(tmp_path):
    monitor, run, resized, gates, _ = _gated_monitor(tmp_path)
    monitor.held(run, 1, 6)
    run.report_counts = {0: 5, 1: 6}
    monitor.on_report(run, 6, committed=False)
    monitor.held(run, 0, 6)
    run.report_counts = {0: 6, 1: 6}
    monitor.on_report(run, 6, committed=True)  # the last rank's report committed checkpoint 6
    assert gates[-1] == {"gate": True, "index": 6, "stop": True} and resized == [True]


def test_a_report_made_before_the_gate_lets_the_held_ranks_go_on(tmp_path):
    # Rank 1's report 3 left before it heard of the gate: it did not hold, so report 3 is
    # no place to stop (rank 1 is past it); rank 0, held at 3, goes on.
    monitor, run, resized, gates, _ = _gated_monitor(tmp_path)
    monitor.held(run, 0, 3)
    run.report_counts = {0: 3, 1: 3}
    monitor.on_report(run, 3, committed=True)
    assert gates[-1] == {"gate": True, "index": 3, "stop": False} and not resized


def test_past_the_deadline_the_ranks_stop_at_the_next_held_report(tmp_path):
    monitor, run, resized, gates, clock = _gated_monitor(tmp_path)
    clock.t += 11  # an interval passed with no checkpoint
    for rank in (0, 1):
        monitor.held(run, rank, 9)
    run.report_counts = {0: 9, 1: 9}
    monitor.on_report(run, 9, committed=False)
    assert gates[-1]["stop"] is True and resized == [True]


def test_no_report_within_two_intervals_resizes_by_a_cancel(tmp_path):
    monitor, run, resized, gates, clock = _gated_monitor(tmp_path)
    clock.t += 15
    monitor(run)
    assert not resized
    clock.t += 10
    monitor(run)
    assert resized == [False]
