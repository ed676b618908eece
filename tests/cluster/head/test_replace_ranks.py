"""The run controller's ``replace_ranks``: ranks whose workers cannot take the run (TensorFlow
set up for other peers, raynb.train.tensorflow) are killed and the run is queued again, as a
resize, not a failure. No processes: the fakes of tests/test_run_controller.py."""

from __future__ import annotations

from support.controller_harness import Harness


def test_named_ranks_are_killed_the_others_cancelled_and_the_run_queued_again(tmp_path):
    h = Harness(tmp_path)
    run = h.running(world_size=3)
    h.reset()
    h.ctl.replace_ranks(run, [1, 2], "ranks [1, 2] run TensorFlow set up for another cluster")
    assert run.state == "FAILING"
    assert sorted(h.effects.ranks("cancel_rank")) == [0, 1, 2]
    assert sorted(h.effects.ranks("kill_rank")) == [1, 2]
    assert any("another cluster" in n for n in h.effects.notes())
    h.ctl.rank_returned(run, 0, "cancelled")
    assert run.state == "PENDING" and run.attempt == 1
    assert run.num_failures == 0  # FailureConfig does not count it
    assert h.effects.named("requeue")


def test_a_second_event_of_the_same_attempt_kills_its_ranks_too(tmp_path):
    h = Harness(tmp_path)
    run = h.running(world_size=3)
    h.ctl.replace_ranks(run, [2], "rank 2")
    h.reset()
    h.ctl.replace_ranks(run, [1], "rank 1")
    assert h.effects.ranks("kill_rank") == [1] and run.state == "FAILING"


def test_a_finished_or_failing_run_is_left_alone(tmp_path):
    h = Harness(tmp_path)
    run = h.failing(world_size=3)  # a real failure first: not a resize
    h.reset()
    h.ctl.replace_ranks(run, [0], "rank 0")
    assert not h.effects.named("kill_rank") and not run.spec.get("_resizing")
