"""The run controller as a state machine, driven through every row of its table.

No processes: the head is a recording fake ``effects``, the run store a recording
fake ``store``, the clock a number advanced by hand, and each run a real ``Run``
with a real ``RunDirectory`` (in ``tmp_path``) and a small fake checkpoint store.
Each test drives a run into a state, sends one event, and checks the next state
and exactly what the controller asked of the world.
"""

from __future__ import annotations

import re

import pytest
from support.controller_harness import Clock, FakeCheckpoints, FakeEffects, FakeStore, Harness, _raised  # noqa: F401

from raynb.cluster.head import controller
from raynb.cluster.head.controller import (
    CANCEL_GRACE_S,
    DEAD_PEER_GRACE_S,
    FailureDecision,
    FailurePolicy,
    IllegalTransition,
)
from raynb.cluster.head.run import Run


def _died(rank: int, signal: str = "SIGKILL") -> dict:
    return {
        "rank": rank,
        "pid": 1000 + rank,
        "hostname": "h",
        "signal": signal,
        "exitcode": None,
        "message": f"rank {rank} (pid {1000 + rank} on h) was killed by {signal}",
    }


def _exited(rank: int, code: int) -> dict:
    return {
        "rank": rank,
        "pid": 1000 + rank,
        "hostname": "h",
        "signal": None,
        "exitcode": code,
        "message": f"rank {rank} (pid {1000 + rank} on h) exited with code {code}",
    }


def _ended_calls() -> list[tuple]:
    """What ``_finish`` asks of the head, in order."""
    return [("release",), ("emit", "state"), ("run_ended",)]


@pytest.fixture
def h(tmp_path):
    return Harness(tmp_path)


# -- the table itself --------------------------------------------------------------------
_ROW = re.compile(r"^\s+(PENDING|RUNNING|FAILING|CANCELLING|any active)\s+(\w+)\s+([A-Z]+)\b")


def test_transitions_dict_has_exactly_the_rows_of_the_docstring_table():
    """The table in the module docstring and TRANSITIONS cannot drift apart: parsed row by
    row ("any active" expands to every active state), they are the same pairs and targets."""
    table: dict[tuple, set] = {}
    rows = 0
    for line in controller.__doc__.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        rows += 1
        state, event, to = m.groups()
        for s in controller.ACTIVE if state == "any active" else (state,):
            table.setdefault((s, event), set()).add(to)
    # 14, PENDING no_room FAILED (a restart with no room), RUNNING resize FAILING (elastic),
    # CANCELLING head_stopping CANCELLED / STOPPED (a cancel asked before the stop)
    assert rows == 18
    assert table == {pair: set(targets) for pair, targets in controller.TRANSITIONS.items()}
    states = set(controller.ACTIVE) | set(controller.TERMINAL)
    assert all(to in states for targets in table.values() for to in targets)
    assert {e for _, e in table} == {
        controller.PLACED,
        controller.CANCEL,
        controller.RANK_FAILED,
        controller.ALL_STOPPED,
        controller.HEAD_STOPPING,
        controller.NO_ROOM,
        controller.RESIZE,
    }


@pytest.mark.parametrize(
    "state,event,to",
    [
        ("PENDING", "placed", "FINISHED"),
        ("PENDING", "all_stopped", "FINISHED"),
        ("RUNNING", "placed", "RUNNING"),
        ("FAILING", "all_stopped", "CANCELLED"),
        ("CANCELLING", "all_stopped", "FAILED"),
        ("FINISHED", "cancel", "CANCELLED"),
        ("FAILED", "head_stopping", "FAILED"),
    ],
)
def test_an_illegal_transition_raises_and_leaves_the_state(h, state, event, to):
    """A pair not in TRANSITIONS (or a target it does not allow) raises IllegalTransition
    naming it, and the run keeps its state."""
    run = h.run()
    run.state = state
    with pytest.raises(IllegalTransition, match=f"{state} --{event}--> {to}"):
        h.ctl._move(run, event, to)
    assert run.state == state


def test_placing_a_running_run_again_is_illegal(h):
    """The public event checks the table too: a RUNNING run cannot be placed twice."""
    run = h.running()
    with pytest.raises(IllegalTransition):
        h.ctl.placed(run, ["a", "b", "c"])
    assert run.ranks == ["local-w0", "local-w1", "local-w2"]


# -- PENDING ------------------------------------------------------------------------------
def test_pending_placed_running(h):
    """PENDING --placed--> RUNNING: the ranks are recorded in order, the clock starts,
    and nothing is asked of the head (the queue sends the tasks)."""
    run = h.run()
    h.ctl.placed(run, ["local-w2", "n1-w0", "local-w0"])
    assert run.state == "RUNNING"
    assert run.ranks == ["local-w2", "n1-w0", "local-w0"]
    assert run.started is not None
    assert h.effects.calls == [] and h.store.calls == []


def test_a_restart_keeps_the_runs_start_time(h):
    """Placed again after a restart, the run's clock continues from its first start."""
    run = h.failing(max_failures=1)
    run.started = 123.0
    for r in (0, 2):
        h.ctl.rank_returned(run, r, "cancelled")
    assert run.state == "PENDING"
    h.ctl.placed(run, ["x", "y", "z"])
    assert run.state == "RUNNING" and run.started == 123.0 and run.ranks == ["x", "y", "z"]


def test_pending_cancel_cancelled(h):
    """PENDING --cancel--> CANCELLED: "cancelled before it started", no rank cancelled,
    the run ends (workers released, state emitted, run_done sent, files closed)."""
    run = h.run()
    h.ctl.cancel(run)
    assert run.state == "CANCELLED"
    assert run.errors == [{"message": "cancelled before it started"}]
    assert h.effects.calls == _ended_calls()
    assert h.effects.events[-1]["state"] == "CANCELLED"
    assert h.effects.events[-1]["message"] == "cancelled before it started"
    assert h.store.calls == [("run_ended", "CANCELLED")]
    assert h.effects.done[0]["state"] == "CANCELLED" and run.ended is not None


# -- RUNNING ------------------------------------------------------------------------------
def test_running_rank_failed_failing_cancels_exactly_the_unfinished_ranks(h):
    """RUNNING --rank_failed--> FAILING: a rank raised; only the ranks not yet done are
    cancelled, and they have CANCEL_GRACE_S from now."""
    run = h.running(world_size=4)
    h.ctl.rank_returned(run, 0, "ok", value_frames=[b"result"])
    h.clock.t = 200.0
    h.ctl.rank_returned(run, 2, "error", _raised(2))
    assert run.state == "FAILING"
    assert h.effects.ranks("cancel_rank") == [1, 3]
    assert run.deadline == 200.0 + CANCEL_GRACE_S
    assert run.errors == [_raised(2)]
    assert run.result == [b"result"]
    assert h.effects.named("release") == [] and h.store.calls == []


def test_running_rank_lost_failing_with_the_dead_peer_grace(h):
    """RUNNING --rank_failed--> FAILING by a death: the death is recorded, the peers are
    cancelled with the shorter DEAD_PEER_GRACE_S (they are likely stuck in a collective)."""
    run = h.running()
    h.ctl.rank_lost(run, 1, _died(1))
    assert run.state == "FAILING"
    assert run.done == {1: "died"}
    assert run.errors == [_died(1)]
    assert h.effects.ranks("cancel_rank") == [0, 2]
    assert run.deadline == 100.0 + DEAD_PEER_GRACE_S


def test_running_rank_cancelled_on_its_own_fails_the_run(h):
    """A rank that stopped as cancelled when nobody asked cannot go on alone: FAILING,
    with an error naming it."""
    run = h.running()
    h.ctl.rank_returned(run, 2, "cancelled")
    assert run.state == "FAILING"
    assert run.errors == [
        {"rank": 2, "message": "rank 2 stopped before the run was cancelled (an interrupt on the worker?)"}
    ]
    assert h.effects.ranks("cancel_rank") == [0, 1]


def test_running_rank_error_without_details_gets_a_default_error(h):
    """An error report with no error dict still names the rank."""
    run = h.running()
    h.ctl.rank_returned(run, 1, "error")
    assert run.errors == [{"rank": 1, "message": "rank 1 failed"}]


def test_running_cancel_cancelling(h):
    """RUNNING --cancel--> CANCELLING: every rank still running is cancelled with
    CANCEL_GRACE_S; nothing ends yet."""
    run = h.running(world_size=4)
    h.ctl.rank_returned(run, 3, "ok")
    h.clock.t = 50.0
    h.ctl.cancel(run)
    assert run.state == "CANCELLING"
    assert h.effects.ranks("cancel_rank") == [0, 1, 2]
    assert run.deadline == 50.0 + CANCEL_GRACE_S
    assert h.effects.named("run_ended") == [] and h.store.calls == []


def test_running_all_stopped_finished_commits_with_run_ended(h):
    """RUNNING --all_stopped--> FINISHED: every rank returned ok; the staged checkpoints are
    committed with run_ended=True before the run's files close; rank 0's value is kept."""
    run = h.running()
    for r in (2, 0):
        h.ctl.rank_returned(run, r, "ok", value_frames=[f"v{r}".encode()])
    assert run.state == "RUNNING" and h.store.calls == []
    h.ctl.rank_returned(run, 1, "ok", value_frames=[b"v1"])
    assert run.state == "FINISHED"
    assert h.store.calls == [("commit_checkpoints", True), ("run_ended", "FINISHED")]
    assert h.effects.calls == _ended_calls()
    assert h.effects.events[-1] == {"kind": "state", "state": "FINISHED", "message": None}
    assert run.result == [b"v0"]
    assert h.effects.done[0]["errors"] == [] and h.store.summaries[0]["state"] == "FINISHED"


def test_a_rank_reporting_twice_counts_once(h):
    """A second task_done from a rank already done is ignored (no early FINISHED)."""
    run = h.running()
    h.ctl.rank_returned(run, 0, "ok")
    h.ctl.rank_returned(run, 0, "ok")
    h.ctl.rank_returned(run, 1, "ok")
    assert run.state == "RUNNING"
    h.ctl.rank_lost(run, 1, _died(1))
    assert run.state == "RUNNING" and run.errors == []


# -- FAILING ------------------------------------------------------------------------------
def test_failing_rank_failed_failing_keeps_the_deadline(h):
    """FAILING --rank_failed--> FAILING: a peer's exception is recorded, nobody is cancelled
    again, and the grace period is not extended."""
    run = h.failing()
    deadline = run.deadline
    h.reset()
    h.clock.t = 100.5
    h.ctl.rank_returned(run, 0, "error", _raised(0, "RuntimeError", "connection closed by peer"))
    assert run.state == "FAILING"
    assert run.deadline == deadline
    assert h.effects.calls == [] and h.store.calls == []
    assert [e["rank"] for e in run.errors] == [1, 0]


def test_failing_rank_lost_shortens_a_longer_deadline(h):
    """A death while FAILING after an exception: the peers wait on the dead rank, so the
    deadline becomes DEAD_PEER_GRACE_S from now when that is sooner."""
    run = h.failing()
    assert run.deadline == 100.0 + CANCEL_GRACE_S
    h.clock.t = 100.25
    h.ctl.rank_lost(run, 2, _died(2))
    assert run.state == "FAILING"
    assert run.deadline == 100.25 + DEAD_PEER_GRACE_S
    assert run.errors == [_raised(1), _died(2)]


def test_failing_rank_lost_never_lengthens_a_shorter_deadline(h):
    """A second death later does not push the earlier dead-peer deadline out."""
    run = h.running(world_size=4)
    h.ctl.rank_lost(run, 0, _died(0))
    first = run.deadline
    h.clock.t = 100.2
    h.ctl.rank_lost(run, 1, _died(1))
    assert run.deadline == first == 100.0 + DEAD_PEER_GRACE_S


def test_tick_before_the_deadline_kills_nothing(h):
    """Within the grace period a tick does nothing."""
    run = h.failing()
    h.reset()
    h.clock.t = run.deadline - 0.01
    h.ctl.tick(run)
    assert h.effects.calls == [] and run.state == "FAILING" and run.deadline is not None


def test_tick_after_the_deadline_kills_the_unfinished_ranks_and_they_count_as_stopped(h):
    """At the deadline the ranks that did not return are killed and marked done: the run
    then stops (here: no restarts left, FAILED naming the exception)."""
    run = h.failing(world_size=4)
    h.ctl.rank_returned(run, 3, "cancelled")
    h.reset()
    h.clock.t = run.deadline
    h.ctl.tick(run)
    assert h.effects.ranks("kill_rank") == [0, 2]
    assert run.done == {1: "error", 3: "cancelled", 0: "killed", 2: "killed"}
    assert run.deadline is None
    assert run.state == "FAILED"
    assert run.errors == [_raised(1)]


def test_tick_cannot_kill_a_rank_whose_worker_is_gone(h):
    """kill_rank False (the worker is already gone): that rank is not marked done, the run
    waits for its loss to be reported, which then stops it."""
    run = h.failing(max_failures=1)
    h.effects.kill_ok = lambda rank: rank != 2
    h.clock.t = 102.0
    h.ctl.tick(run)
    assert run.done == {1: "error", 0: "killed"}
    assert run.state == "FAILING"
    h.ctl.tick(run)  # the deadline is spent: no second kill
    assert h.effects.ranks("kill_rank") == [0, 2]
    h.ctl.rank_lost(run, 2, _exited(2, -9))
    assert run.state == "PENDING"


def test_tick_while_running_does_nothing(h):
    """A RUNNING run has no grace period: ticks never kill its ranks, however late."""
    run = h.running()
    h.clock.t = 1e9
    h.ctl.tick(run)
    assert h.effects.calls == []


def test_failing_all_stopped_pending_on_retry(h):
    """FAILING --all_stopped--> PENDING (RETRY): the attempt counts up, done/errors/deadline
    and staged reports reset, staging discarded, a "restart 1/N" note names the death (the
    primary cause, over the peer's earlier exception), the state is written and the run
    requeued, after its workers were released."""
    run = h.running(max_failures=2)
    run.report_counts, run.rank0_metrics = {0: 1, 1: 1, 2: 1}, {0: {"loss": 1.0}}
    h.ctl.rank_returned(run, 0, "error", _raised(0, "RuntimeError", "connection closed by peer"))
    h.ctl.rank_lost(run, 2, _died(2))
    h.reset()
    h.ctl.rank_returned(run, 1, "cancelled")
    assert run.state == "PENDING"
    assert run.attempt == 1
    assert run.done == {} and run.errors == [] and run.deadline is None
    assert run.staged == {} and run.report_counts == {} and run.rank0_metrics == {}
    assert run.failures == [_died(2)]
    assert run.store.discarded == 1
    assert h.effects.notes() == ["restart 1/2: rank 2 died, SIGKILL; no checkpoint yet, starting over"]
    note = h.effects.events[0]
    assert note["restart"] == 1 and note["cause"] == _died(2)
    assert h.effects.events[1] == {"kind": "state", "state": "PENDING", "attempt": 1}
    assert h.effects.calls == [("release",), ("emit", "note"), ("emit", "state"), ("requeue",)]
    assert h.store.calls == [("write_state", "PENDING", 1)]
    assert h.effects.named("run_ended") == []


def test_restart_note_names_the_checkpoint_it_resumes_from(h):
    """With a committed checkpoint the note says where the restart resumes; an exit code is
    described as such."""
    run = h.running(world_size=2, max_failures=-1, latest={"name": "checkpoint_000003"})
    h.ctl.rank_lost(run, 0, _exited(0, 3))
    h.ctl.rank_returned(run, 1, "cancelled")
    assert h.effects.notes() == [
        "restart 1/unlimited: rank 0 exited with code 3; resuming from checkpoint_000003"
    ]


def test_restart_note_names_the_checkpoint_the_run_started_with(h):
    """No checkpoint of its own yet, but the run was started from one: it resumes from that."""
    run = h.running(world_size=1, max_failures=1, resume_from_checkpoint="/old/ckpt")
    h.ctl.rank_returned(run, 0, "error", _raised(0))
    assert h.effects.notes() == [
        "restart 1/1: rank 0 raised ValueError: boom; resuming from the checkpoint it started with"
    ]


def test_restart_note_explains_checkpoints_lost_for_want_of_reports(h):
    """Rank 0 reported a checkpoint the others never reported: the note says it was not
    saved, which ranks were behind and how to fix it."""
    run = h.running(world_size=3, max_failures=1)
    run.staged = {1: {0: "/staging/0_1/rank_0"}, 2: {0: "/staging/0_2/rank_0"}}
    run.report_counts = {0: 2, 1: 1}
    h.ctl.rank_returned(run, 1, "error", _raised(1))
    h.ctl.rank_returned(run, 0, "cancelled")
    h.ctl.rank_returned(run, 2, "cancelled")
    assert h.effects.notes() == [
        "restart 1/1: rank 1 raised ValueError: boom; no checkpoint saved yet, starting over "
        "(2 reported checkpoint(s) were not saved: rank(s) 2 had not made report 1; a checkpoint "
        "is saved once every rank has made the report that carries it, so call report() on every "
        "rank, passing checkpoint=None where there is none)"
    ]


def test_failing_all_stopped_failed_on_raise_names_the_cause_first(h):
    """FAILING --all_stopped--> FAILED (RAISE, max_failures=0): run.errors leads with the
    death although the peer's exception arrived first; the run ends with no requeue."""
    run = h.running()
    h.ctl.rank_returned(run, 1, "error", _raised(1, "RuntimeError", "connection closed by peer"))
    h.ctl.rank_lost(run, 0, _exited(0, 1))
    h.reset()
    h.ctl.rank_returned(run, 2, "cancelled")
    assert run.state == "FAILED"
    assert run.errors == [_exited(0, 1), _raised(1, "RuntimeError", "connection closed by peer")]
    assert run.failures == [_exited(0, 1)]
    assert run.attempt == 0
    assert h.effects.calls == _ended_calls()
    assert h.effects.events[-1]["message"] == "rank 0 (pid 1000 on h) exited with code 1 (+1 more)"
    assert h.store.calls == [("run_ended", "FAILED")]
    assert h.store.summaries[0]["errors"] == run.errors
    assert h.effects.done[0]["errors"] == run.errors


def test_failing_cancel_cancelling_then_cancelled_without_restart(h):
    """FAILING --cancel--> CANCELLING: a cancel between a failure and the restart wins; when
    the ranks stop the run is CANCELLED, with no restart, note or requeue, despite restarts left."""
    run = h.failing(max_failures=5)
    h.reset()
    h.ctl.cancel(run)
    assert run.state == "CANCELLING"
    assert h.effects.calls == []  # the ranks are already being cancelled
    h.ctl.rank_returned(run, 0, "cancelled")
    h.ctl.rank_returned(run, 2, "cancelled")
    assert run.state == "CANCELLED"
    assert run.attempt == 0 and run.failures == []
    assert h.effects.calls == _ended_calls() and h.effects.notes() == []
    assert h.store.summaries[0]["errors"] == []


def test_a_failing_run_cancelled_then_killed_at_the_deadline_ends_cancelled(h):
    """FAILING, then cancelled: the kills at the deadline stop the last ranks, and the run
    ends CANCELLED (not restarted, although restarts are left)."""
    run = h.failing(max_failures=5)
    h.ctl.cancel(run)
    h.clock.t = run.deadline + 1
    h.ctl.tick(run)
    assert run.state == "CANCELLED" and h.effects.named("requeue") == []


# -- CANCELLING --------------------------------------------------------------------------
def test_cancelling_rank_failed_cancelling(h):
    """CANCELLING --rank_failed--> CANCELLING: a rank dying while being stopped changes
    nothing (its death is not recorded as the run's error) and cancels nobody again."""
    run = h.cancelling()
    h.reset()
    h.ctl.rank_lost(run, 1, _died(1))
    assert run.state == "CANCELLING"
    assert run.done == {1: "died"} and run.errors == []
    h.ctl.rank_returned(run, 0, "error", _raised(0, "KeyboardInterrupt", ""))
    assert run.state == "CANCELLING"
    assert h.effects.calls == [] and h.store.calls == []


def test_cancelling_all_stopped_cancelled(h):
    """CANCELLING --all_stopped--> CANCELLED: the last rank returns; the run ends, nothing is
    committed or requeued, and no failure is counted."""
    run = h.cancelling()
    h.reset()
    for r in (0, 1):
        h.ctl.rank_returned(run, r, "cancelled")
    assert run.state == "CANCELLING"
    h.ctl.rank_returned(run, 2, "ok")
    assert run.state == "CANCELLED"
    assert h.effects.calls == _ended_calls()
    assert h.store.calls == [("run_ended", "CANCELLED")]
    assert run.failures == [] and h.effects.done[0]["state"] == "CANCELLED"


def test_cancelling_tick_after_the_deadline_kills_and_cancels(h):
    """A rank stuck past the cancel grace is killed; the run then ends CANCELLED."""
    run = h.cancelling()
    h.ctl.rank_returned(run, 0, "cancelled")
    h.clock.t = 100.0 + CANCEL_GRACE_S
    h.ctl.tick(run)
    assert h.effects.ranks("kill_rank") == [1, 2]
    assert run.state == "CANCELLED"


def test_cancel_twice_cancels_the_ranks_once(h):
    """A second cancel while CANCELLING does nothing (no second round, same deadline)."""
    run = h.cancelling()
    deadline = run.deadline
    h.clock.t = 100.5
    h.ctl.cancel(run)
    assert h.effects.ranks("cancel_rank") == [0, 1, 2] and run.deadline == deadline


# -- head stopping and terminal runs -----------------------------------------------------
def _drive(h: Harness, state: str) -> Run:
    if state == "PENDING":
        return h.run()
    if state == "RUNNING":
        return h.running()
    if state == "FAILING":
        return h.failing()
    return h.cancelling()


@pytest.mark.parametrize("state", ["PENDING", "RUNNING", "FAILING"])
def test_head_stopping_fails_every_active_run(h, state):
    """any active run not being cancelled --head_stopping--> FAILED: the last error says why,
    and the run ends."""
    run = _drive(h, state)
    h.reset()
    h.ctl.head_stopping(run, "the raynb cluster was stopped")
    assert run.state == "FAILED"
    assert run.errors[-1] == {"message": "the raynb cluster was stopped"}
    assert h.effects.calls == _ended_calls()
    assert h.store.calls == [("run_ended", "FAILED")]


def test_head_stopping_ends_a_run_being_cancelled_as_cancelled(h):
    """CANCELLING --head_stopping--> CANCELLED: its client cancelled it before the stop (a
    script's SIGTERM cancels its run, then stops the cluster it started); no error added."""
    run = _drive(h, "CANCELLING")
    errors = list(run.errors)
    h.reset()
    h.ctl.head_stopping(run, "the raynb cluster was stopped")
    assert run.state == "CANCELLED"
    assert run.errors == errors
    assert h.store.calls == [("run_ended", "CANCELLED")]


def _terminal(h: Harness, state: str) -> Run:
    run = h.running()
    if state == "FINISHED":
        for r in range(3):
            h.ctl.rank_returned(run, r, "ok")
    elif state == "FAILED":
        h.ctl.head_stopping(run, "stopped")
    else:
        h.ctl.cancel(run)
        for r in range(3):
            h.ctl.rank_returned(run, r, "cancelled")
    assert run.state == state
    return run


@pytest.mark.parametrize("state", ["FINISHED", "FAILED", "CANCELLED"])
def test_events_for_a_terminal_run_are_ignored(h, state):
    """A late cancel, rank report, death, tick or head stop for an ended run changes
    nothing and asks nothing of the head or the store."""
    run = _terminal(h, state)
    run.deadline = 0.0  # even a stale deadline must not make a tick kill anything
    errors = list(run.errors)
    h.reset()
    h.clock.t = 1e6
    h.ctl.cancel(run)
    h.ctl.rank_returned(run, 0, "error", _raised(0))
    h.ctl.rank_lost(run, 1, _died(1))
    h.ctl.tick(run)
    h.ctl.head_stopping(run, "late")
    assert run.state == state and run.errors == errors
    assert h.effects.calls == [] and h.store.calls == []


def test_a_pending_run_ignores_rank_events(h):
    """A PENDING run (between attempts) ignores late reports from the previous attempt."""
    run = h.run()
    h.ctl.rank_returned(run, 0, "error", _raised(0))
    h.ctl.rank_lost(run, 0, _died(0))
    assert run.state == "PENDING" and run.done == {} and run.errors == []
    assert h.effects.calls == []


# -- the failure policy ------------------------------------------------------------------
def _fail_once(h: Harness, run: Run, rank: int = 0) -> None:
    """Place the run and make one of its attempts fail (every rank stops)."""
    h.ctl.placed(run, [f"w{r}" for r in range(run.world_size)])
    h.ctl.rank_returned(run, rank, "error", _raised(rank, msg=f"attempt {run.attempt}"))
    for r in range(run.world_size):
        if r != rank:
            h.ctl.rank_returned(run, r, "cancelled")


class AlwaysRaise:
    def make_decision(self, failures_this_fit):
        return FailureDecision.RAISE


def test_a_custom_policy_that_always_raises_makes_the_first_failure_final(tmp_path):
    """The injected policy decides, not the run's max_failures=3: FAILED at once."""
    h = Harness(tmp_path, failure_policy=lambda run: AlwaysRaise())
    run = h.run(world_size=2, max_failures=3)
    _fail_once(h, run)
    assert run.state == "FAILED"
    assert h.effects.named("requeue") == [] and run.attempt == 0


def test_the_policy_is_asked_with_this_fits_failure_count(tmp_path):
    """The policy gets the run and the number of failures of this fit (failures of an
    earlier fit of a resumed run are not counted)."""
    seen = []

    class Recording:
        def make_decision(self, n):
            seen.append(n)
            return FailureDecision.RETRY if n < 3 else FailureDecision.RAISE

    h = Harness(tmp_path, failure_policy=lambda run: seen.append(run.name) or Recording())
    run = h.run(world_size=2)
    run.failures, run.failures_before = [{"message": "the head died"}], 1
    for _ in range(3):
        _fail_once(h, run)
    assert seen == [run.name, 1, run.name, 2, run.name, 3]
    assert run.state == "FAILED"


def test_failure_policy_minus_one_always_retries(tmp_path):
    """FailurePolicy(-1) retries whatever the count; injected, a run keeps restarting."""
    assert all(FailurePolicy(-1).make_decision(n) is FailureDecision.RETRY for n in range(1, 500))
    h = Harness(tmp_path, failure_policy=lambda run: FailurePolicy(-1))
    run = h.run(world_size=2, max_failures=0)
    for _ in range(6):
        _fail_once(h, run)
        assert run.state == "PENDING"
    assert run.attempt == 6 and run.num_failures == 6
    assert len(h.effects.named("requeue")) == 6


def test_unlimited_max_failures_retries_with_the_default_policy(h):
    """max_failures=-1 in the run's spec: the default policy always retries, and the notes
    count up with "unlimited"."""
    run = h.run(world_size=2, max_failures=-1)
    for _ in range(3):
        _fail_once(h, run)
    assert run.state == "PENDING"
    assert [n.split(":")[0] for n in h.effects.notes()] == [
        "restart 1/unlimited",
        "restart 2/unlimited",
        "restart 3/unlimited",
    ]


def test_failure_policy_two_retries_twice_then_raises(tmp_path):
    """FailurePolicy(2): the first two failures restart the run, the third is final, and
    the final errors name every failure of this fit, the last cause among them."""
    assert [FailurePolicy(2).make_decision(n) for n in (1, 2, 3, 4)] == [
        FailureDecision.RETRY,
        FailureDecision.RETRY,
        FailureDecision.RAISE,
        FailureDecision.RAISE,
    ]
    h = Harness(tmp_path, failure_policy=lambda run: FailurePolicy(2))
    run = h.run(world_size=2, max_failures=0)
    _fail_once(h, run)
    assert run.state == "PENDING" and run.attempt == 1
    _fail_once(h, run, rank=1)
    assert run.state == "PENDING" and run.attempt == 2
    _fail_once(h, run)
    assert run.state == "FAILED" and run.attempt == 2
    assert len(h.effects.named("requeue")) == 2
    assert [e["message"] for e in run.errors] == ["attempt 0", "attempt 1", "attempt 2"]
    assert [e["rank"] for e in run.errors] == [0, 1, 0]


def test_default_policy_follows_the_runs_max_failures(h):
    """Without an injected policy, max_failures=1 allows one restart, then FAILED."""
    run = h.run(world_size=2, max_failures=1)
    _fail_once(h, run)
    assert run.state == "PENDING"
    _fail_once(h, run)
    assert run.state == "FAILED"
    assert h.effects.notes() == [
        "restart 1/1: rank 0 raised ValueError: attempt 0; no checkpoint yet, starting over"
    ]


def test_a_restart_with_no_room_fails_naming_the_wait(tmp_path):
    """PENDING --no_room--> FAILED: the error says why, the clients are told it ended."""
    h = Harness(tmp_path)
    run = h.run(world_size=4, max_failures=2)
    run.attempt = 1
    h.ctl.no_room(run, "no node with room joined within 300s")
    assert run.state == controller.FAILED
    assert run.errors[0]["message"] == "no node with room joined within 300s"
    assert h.effects.named("run_ended")


def test_a_blocked_rank_is_killed_at_once_when_a_peer_died(h):
    """The dead-peer grace follows the peers: a rank whose worker says its cancel did not
    stop it (rank_blocked) is killed as soon as a peer died, before the deadline."""
    run = h.running()
    h.ctl.rank_lost(run, 1, _died(1))
    h.reset()
    h.ctl.rank_blocked(run, 0)
    assert h.effects.ranks("kill_rank") == [0]
    assert run.done == {1: "died", 0: "killed"} and run.state == "FAILING"
    h.ctl.rank_returned(run, 2, "cancelled")
    assert run.state == "FAILED"  # every rank stopped: no wait for the deadline


def test_a_blocked_rank_waits_out_the_grace_of_an_exception_until_a_peer_dies(h):
    """After a peer's exception a blocked rank may still return (a long C call): it keeps
    its grace; if a peer then dies, the ranks that said they are blocked are killed."""
    run = h.failing()
    h.reset()
    h.ctl.rank_blocked(run, 0)
    assert h.effects.ranks("kill_rank") == []
    h.ctl.rank_lost(run, 2, _died(2))
    assert h.effects.ranks("kill_rank") == [0]
    assert run.done == {1: "error", 2: "died", 0: "killed"}
