"""Elastic runs (``ScalingConfig(num_workers=(min, max))``, Ray Train v2): the API and its
checks, the scheduler's sizing, and real runs on private clusters that start with what
they can place and go on at a smaller world size after a rank is SIGKILLed.
"""

from __future__ import annotations

import sys

import cloudpickle
import pytest

from raynb.cluster.head import scheduler
from raynb.cluster.head.scheduler import Fork, NodeView, Placement, Request, Snapshot, WorkerView
from raynb.notebook.magics.arguments import workers_arg
from raynb.train import ScalingConfig

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- the API ----------------------------------------------------------------------
def test_scaling_config_takes_min_max_as_ray_train_v2():
    s = ScalingConfig(num_workers=(2, 4), elastic_resize_monitor_interval_s=5)
    assert s.elasticity_enabled and (s.min_workers, s.max_workers) == (2, 4)
    assert s.elastic_resize_monitor_interval_s == 5
    fixed = ScalingConfig(num_workers=3)
    assert not fixed.elasticity_enabled and fixed.num_workers == 3 == fixed.min_workers == fixed.max_workers
    assert ScalingConfig().elastic_resize_monitor_interval_s == 60.0  # Ray's default


@pytest.mark.parametrize(
    "bad, words",
    [
        ((4, 2), ["(4, 2)", "min_workers=4", "max_workers=2"]),
        ((0, 3), ["(0, 3)", "min_workers=0", ">= 1"]),
        ((1.5, 3), ["(1.5, 3)", "pair of integers"]),
        ((1, 2, 3), ["(1, 2, 3)", "pair of integers"]),
        ("2", ["'2'", "integer >= 1"]),
        (0, ["num_workers=0"]),
    ],
)
def test_bad_num_workers_is_a_value_error_naming_the_values(bad, words):
    with pytest.raises(ValueError) as e:
        ScalingConfig(num_workers=bad)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_negative_monitor_interval_is_refused():
    with pytest.raises(ValueError, match="elastic_resize_monitor_interval_s=-1"):
        ScalingConfig(num_workers=(1, 2), elastic_resize_monitor_interval_s=-1)


def test_magic_workers_takes_a_range():
    import argparse

    assert workers_arg("4") == 4 and workers_arg("2-4") == (2, 4)
    for bad in ("4-2", "0-3", "a-b", "2-"):
        with pytest.raises(argparse.ArgumentTypeError):
            workers_arg(bad)


# -- the scheduler's sizing (pure) --------------------------------------------------
def _snap(idle: int, busy: int = 0, max_workers: int = 4, spawning: int = 0) -> Snapshot:
    workers = tuple(WorkerView(f"w{i}", "local", busy=i < busy) for i in range(idle + busy))
    return Snapshot(
        nodes=(NodeView("local", max_workers, spawning, num_workers=idle + busy),), workers=workers
    )


def test_elastic_places_up_to_max_on_what_is_idle():
    d = scheduler.place(Request(8, min_workers=2), _snap(idle=4))
    assert isinstance(d, Placement) and len(d.worker_ids) == 4


def test_elastic_forks_up_to_the_nodes_room_first():
    d = scheduler.place(Request(8, min_workers=2), _snap(idle=2, max_workers=4))
    assert isinstance(d, Fork) and d.forks == {"local": 2} and d.unplaceable == 0


def test_elastic_below_min_waits_saying_how_many_are_missing():
    d = scheduler.place(Request(8, min_workers=4), _snap(idle=1, busy=2, max_workers=3))
    assert isinstance(d, Fork) and d.unplaceable == 3


def test_elastic_restart_goes_on_with_what_is_idle_now():
    # A replacement is being forked; a restart after a failure does not wait for it.
    d = scheduler.place(Request(4, min_workers=2, now=True), _snap(idle=3, max_workers=4, spawning=1))
    assert isinstance(d, Placement) and len(d.worker_ids) == 3


def test_fixed_request_is_placed_as_before():
    assert isinstance(scheduler.place(Request(4), _snap(idle=3)), Fork)
    assert len(scheduler.place(Request(2), _snap(idle=3)).worker_ids) == 2


# -- the controller's resize and the grow monitor (no process) ------------------------
def test_resize_is_not_a_failure_and_requeues(tmp_path):
    from support.controller_harness import Harness

    h = Harness(tmp_path)
    run = h.running(world_size=4, min_workers=1)
    run.ranks = run.ranks[:2]  # placed on 2 of its max 4
    h.ctl.resize(run)
    assert run.state == "FAILING" and h.effects.ranks("cancel_rank") == [0, 1]
    for rank in (0, 1):
        h.ctl.rank_returned(run, rank, "cancelled")
    assert run.state == "PENDING" and run.attempt == 1 and run.failures == []
    assert h.effects.named("requeue")


def test_a_rank_error_during_a_resize_is_a_failure(tmp_path):
    from support.controller_harness import Harness

    h = Harness(tmp_path)
    run = h.running(world_size=2, min_workers=1, max_failures=0)
    run.ranks = run.ranks[:1]
    h.ctl.resize(run)
    h.ctl.rank_returned(run, 0, "error", {"rank": 0, "exc_type": "ValueError", "message": "boom"})
    assert run.state == "FAILED" and len(run.failures) == 1


def test_grow_monitor_waits_an_interval_then_for_the_next_checkpoint(tmp_path):
    from support.controller_harness import Clock, Harness

    from raynb.cluster.head.elastic import GrowMonitor

    class Registry:
        def snapshot(self):
            return _snap(idle=2, busy=2, max_workers=4)  # busy: the run's own w0, w1

    h, clock, resized, notes = Harness(tmp_path), Clock(), [], []
    monitor = GrowMonitor(Registry(), resized.append, lambda run, e: notes.append(e["text"]), clock)
    run = h.running(world_size=4, min_workers=1, elastic_resize_monitor_interval_s=10)
    run.ranks = ["w0", "w1"]
    monitor(run)  # the attempt's first look: an interval from now
    clock.t += 5
    monitor(run)
    assert not notes
    clock.t += 6
    monitor(run)
    assert notes[0] == "room for 4 ranks (now 2): growing at the next checkpoint" and not resized
    assert notes[1].startswith("warning: this elastic run has saved no checkpoint"), notes  # once
    run.store.latest = {"name": "checkpoint_000001", "index": 1}
    monitor(run)  # a checkpoint was committed since: grow now
    assert resized == [run]
