"""One run's life: its states, what moves it between them, and the failure policy.

The model is Ray Train v2's controller: an explicit state machine whose decisions
after a failure come from an injected :class:`FailurePolicy`. The head's server
turns messages into the events below and calls the matching method; everything
the controller does to the world (cancel or kill a rank, give workers back, queue
the run again, tell its clients) goes through ``effects`` (the head), and
everything it writes goes through ``store``, so a unit test can drive it through
every transition with no process at all.

Every transition there is, at a glance::

    state        event           next state   what happens
    PENDING      placed          RUNNING      the scheduler found its ranks; they start
    PENDING      cancel          CANCELLED    cancelled before it started
    PENDING      cancel          STOPPED      a Tune STOP before it started
    RUNNING      rank_failed     FAILING      a rank raised, died, or stopped on its own, or a run file could not be written: stop the ranks
    RUNNING      cancel          CANCELLING   stop every rank (an interrupt, a Tune STOP)
    RUNNING      all_stopped     FINISHED     every rank returned; staged checkpoints are committed
    RUNNING      resize          FAILING      an elastic run has room to grow (head/elastic.py): stop the ranks, then restart on more (not a failure)
    FAILING      rank_failed     FAILING      its peers fail too (a collective with a dead peer)
    FAILING      cancel          CANCELLING   a cancel between a failure and the restart wins
    FAILING      all_stopped     PENDING      FailurePolicy says RETRY: queued again, from the latest checkpoint
    FAILING      all_stopped     FAILED       FailurePolicy says RAISE (always after a write error): the failures are named
    CANCELLING   rank_failed     CANCELLING   (a rank dying while it is being stopped)
    CANCELLING   all_stopped     CANCELLED
    CANCELLING   all_stopped     STOPPED      the cancel was a Tune scheduler's STOP (or time budget)
    PENDING      no_room         FAILED       a restarted run waited REPLACEMENT_WAIT_S for nodes with room for its ranks, in vain (or its in-memory data did not reach its nodes: head/data_gate.py)
    any active   head_stopping   FAILED       the cluster stopped under the run (or a queued run's files could not be written)
    CANCELLING   head_stopping   CANCELLED    its client cancelled it before the stop (a script's SIGTERM cancels its run, then stops its cluster)
    CANCELLING   head_stopping   STOPPED      the same, for a Tune STOP

FAILING and CANCELLING give the ranks still running a grace period (a rank stuck
in a collective never returns by itself); at its deadline they are killed and
their node replaces them, which counts as stopped.
"""

from __future__ import annotations

import enum
import logging
import os
import time
from typing import Callable, Protocol

from .failures import describe_cause, error_summary, primary_error, unsaved_checkpoints  # noqa: F401
from .run import TERMINAL, Run

log = logging.getLogger("raynb.head")

PENDING, RUNNING, FAILING, CANCELLING = "PENDING", "RUNNING", "FAILING", "CANCELLING"
FINISHED, FAILED, CANCELLED, STOPPED = TERMINAL
ACTIVE = (PENDING, RUNNING, FAILING, CANCELLING)

# Events (the second column of the table above).
PLACED, CANCEL, RANK_FAILED, ALL_STOPPED, HEAD_STOPPING, NO_ROOM, RESIZE = (
    "placed",
    "cancel",
    "rank_failed",
    "all_stopped",
    "head_stopping",
    "no_room",
    "resize",
)

TRANSITIONS: dict[tuple[str, str], tuple[str, ...]] = {
    (PENDING, PLACED): (RUNNING,),
    (PENDING, CANCEL): (CANCELLED, STOPPED),
    (RUNNING, RANK_FAILED): (FAILING,),
    (RUNNING, CANCEL): (CANCELLING,),
    (RUNNING, ALL_STOPPED): (FINISHED,),
    (RUNNING, RESIZE): (FAILING,),
    (FAILING, RANK_FAILED): (FAILING,),
    (FAILING, CANCEL): (CANCELLING,),
    (FAILING, ALL_STOPPED): (PENDING, FAILED),
    (PENDING, NO_ROOM): (FAILED,),
    (CANCELLING, RANK_FAILED): (CANCELLING,),
    (CANCELLING, ALL_STOPPED): (CANCELLED, STOPPED),
    **{(state, HEAD_STOPPING): (FAILED,) for state in ACTIVE},
    # A cancel asked before the stop: the stop only ends it sooner.
    (CANCELLING, HEAD_STOPPING): (FAILED, CANCELLED, STOPPED),
}

# A cancelled or failed run's ranks get this long to return before they are
# killed and replaced (a rank stuck in a collective never returns on its own).
CANCEL_GRACE_S = 1.0
# When a rank died, its peers are most likely blocked inside a collective, where no
# interrupt reaches them: they are replaced from the zygote sooner (a restart waits on them).
DEAD_PEER_GRACE_S = 0.3
# Ranks an elastic grow stopped inside report() return by themselves; past this they are
# killed as any rank that does not stop.
RESIZE_AT_REPORT_GRACE_S = 5.0
# Fields added to every report (not the user's metrics).
AUTO_FIELDS = ("training_iteration", "timestamp", "time_total_s", "time_this_iter_s")


class FailureDecision(enum.Enum):
    RETRY = "RETRY"  # start the run again on warm workers, from its latest checkpoint
    RAISE = "RAISE"  # the run FAILED


class FailurePolicy:
    """``FailureConfig(max_failures)``: retry while this fit has failed at most
    ``max_failures`` times (-1: always). Ray Train v2's ``DefaultFailurePolicy``."""

    def __init__(self, max_failures: int):
        self.max_failures = max_failures

    def make_decision(self, failures_this_fit: int) -> FailureDecision:
        if self.max_failures < 0 or failures_this_fit <= self.max_failures:
            return FailureDecision.RETRY
        return FailureDecision.RAISE


def default_failure_policy(run: Run) -> FailurePolicy:
    return FailurePolicy(run.max_failures)


class Effects(Protocol):
    """What a controller asks of the head."""

    def cancel_rank(self, run: Run, rank: int) -> None: ...
    def kill_rank(self, run: Run, rank: int) -> bool: ...  # False: its worker is already gone
    def release(self, run: Run) -> None: ...  # its workers and GPUs go back
    def requeue(self, run: Run) -> None: ...  # at the front of the queue
    def emit(self, run: Run, event: dict) -> None: ...  # to the run's clients
    def run_ended(self, run: Run) -> None: ...  # run_done to the run's clients


class RunStoreLike(Protocol):
    def commit_checkpoints(self, run: Run, run_ended: bool = False) -> None: ...
    def write_state(self, run: Run) -> None: ...
    def uploading(self, run: Run) -> bool: ...
    def run_ended(self, run: Run) -> None: ...


class IllegalTransition(RuntimeError):
    pass


class RunController:
    """Drives runs through the table above.

    Args:
        effects: the head (see :class:`Effects`).
        store: the run store (checkpoint commits, ``run.json``, closing the files).
        failure_policy: the policy for a run, given the run (default: its FailureConfig).
        clock: ``time.monotonic`` (injectable for tests).
    """

    def __init__(
        self,
        effects: Effects,
        store: RunStoreLike,
        failure_policy: Callable[[Run], FailurePolicy] = default_failure_policy,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.effects, self.store = effects, store
        self.failure_policy = failure_policy
        self.clock = clock
        self.grow_monitor: Callable[[Run], None] | None = None  # set by the queue (head/elastic.py)

    def _move(self, run: Run, event: str, to: str) -> None:
        allowed = TRANSITIONS.get((run.state, event), ())
        if to not in allowed:
            raise IllegalTransition(f"run {run.name}: {run.state} --{event}--> {to} is not a transition")
        run.state = to

    # -- events -----------------------------------------------------------------
    def placed(self, run: Run, worker_ids: list) -> None:
        """The scheduler placed the run: rank r runs on ``worker_ids[r]``."""
        self._move(run, PLACED, RUNNING)
        run.ranks = list(worker_ids)
        run.started = run.started or time.time()  # a restart continues the run's clock

    def cancel(self, run: Run, stop: bool = False) -> None:
        """A client cancelled the run (an interrupt, a Tune STOP or exploit). ``stop``: a
        Tune scheduler's STOP (or time budget), and the run ends STOPPED, not CANCELLED."""
        if run.state in ACTIVE:
            run.stop_requested = run.stop_requested or stop
        if run.state == PENDING:
            self._move(run, CANCEL, self._cancelled(run))
            run.errors.append({"message": f"{self._cancelled(run).lower()} before it started"})
            self._finish(run)
        elif run.state == RUNNING:
            self._begin_stopping(run, CANCEL, CANCELLING, CANCEL_GRACE_S)
            self._maybe_all_stopped(run)
        elif run.state == FAILING:
            # Lands between a rank's failure and the restart: the ranks are already being
            # stopped, and when they are, the run ends CANCELLED instead of restarting.
            self._move(run, CANCEL, CANCELLING)
            self._maybe_all_stopped(run)

    def rank_returned(
        self, run: Run, rank: int, status: str, error: dict | None = None, value_frames: list | None = None
    ) -> None:
        """Rank ``rank``'s function ended: ``status`` ok | error | cancelled."""
        if run.state not in (RUNNING, FAILING, CANCELLING) or rank in run.done:
            return
        run.done[rank] = status
        if status == "ok" and rank == 0:
            run.result = list(value_frames or [])
        elif status == "error":
            run.errors.append(error or {"rank": rank, "message": f"rank {rank} failed"})
            self._rank_failed(run, CANCEL_GRACE_S)
        elif status == "cancelled" and not run.finishing:
            # Nobody asked: the rank cannot go on alone (its peers would wait forever).
            run.errors.append(
                {
                    "rank": rank,
                    "message": f"rank {rank} stopped before the run was "
                    "cancelled (an interrupt on the worker?)",
                }
            )
            self._rank_failed(run, CANCEL_GRACE_S)
        self._maybe_all_stopped(run)

    def rank_lost(self, run: Run, rank: int, error: dict) -> None:
        """Rank ``rank``'s worker died or vanished with its node; ``error`` names how."""
        if run.state not in (RUNNING, FAILING, CANCELLING) or rank in run.done:
            return
        run.done[rank] = "died"
        if run.state != CANCELLING:
            # Recorded even when a peer's error came first: the death is the cause that a
            # restart note and the final error must name.
            run.errors.append(error)
        if run.state == FAILING and run.deadline is not None:
            # A peer's gloo error ("connection closed by peer") often arrives before the
            # death and started the longer grace of an exception; the ranks still running
            # wait on the dead one in a collective, so the dead-peer grace applies from now.
            run.deadline = min(run.deadline, self.clock() + DEAD_PEER_GRACE_S)
        self._rank_failed(run, DEAD_PEER_GRACE_S)
        self._kill_blocked(run)  # peers that said they are stuck (rank_blocked) will not return
        self._maybe_all_stopped(run)

    def rank_blocked(self, run: Run, rank: int) -> None:
        """Rank ``rank`` was cancelled and is still inside a call no interrupt reaches
        (its worker says so ``worker.BLOCKED_AFTER_S`` after the cancel; most likely a
        collective). When a peer of it died, it cannot return: it is killed now, not at
        the end of ``DEAD_PEER_GRACE_S`` (the grace follows the peers). Otherwise (a
        cancel, a peer's exception) the grace stands: a long C call may still return."""
        if not run.finishing or rank in run.done:
            return
        run.blocked.add(rank)
        self._kill_blocked(run)
        self._maybe_all_stopped(run)

    def _kill_blocked(self, run: Run) -> None:
        if "died" not in run.done.values():
            return
        for rank in sorted(run.blocked):
            if rank not in run.done and self.effects.kill_rank(run, rank):
                log.info("run %s: rank %d is blocked and a peer died; killed it", run.name, rank)
                run.done[rank] = "killed"
        run.blocked.clear()

    def tick(self, run: Run) -> None:
        """Ranks that did not return within the grace period are killed; their node
        replaces them."""
        if run.state == RUNNING and run.spec.get("_awaiting_uploads"):
            return self._maybe_all_stopped(run)  # every rank returned; its checkpoints upload
        if run.state == RUNNING and self.grow_monitor is not None:
            self.grow_monitor(run)  # an elastic run with room to grow is resized (head/elastic.py)
        if not run.finishing or run.deadline is None or self.clock() < run.deadline:
            return
        run.deadline = None
        for rank in range(len(run.ranks)):
            if rank not in run.done and self.effects.kill_rank(run, rank):
                log.info("run %s: rank %d did not stop in time; killed it", run.name, rank)
                run.done[rank] = "killed"
        self._maybe_all_stopped(run)

    def resize(self, run: Run, at_report: bool = False) -> None:
        """An elastic run has room for more ranks (``head/elastic.GrowMonitor``): its ranks
        are stopped and it is queued again, to start on more from its latest checkpoint. A
        planned resize, not a failure: FailureConfig does not count it (unless a rank
        fails on the way). ``at_report``: the ranks were told to stop inside ``report()``
        (they return by themselves: no cancel interrupts their cleanup)."""
        if run.state != RUNNING or run.done or run.spec.get("_awaiting_uploads"):
            return  # a rank already returned: the run is ending anyway
        run.spec["_resizing"] = True
        grace = RESIZE_AT_REPORT_GRACE_S if at_report else CANCEL_GRACE_S
        self._begin_stopping(run, RESIZE, FAILING, grace, cancel=not at_report)
        self._maybe_all_stopped(run)

    def replace_ranks(self, run: Run, ranks: list, why: str) -> None:
        """Ranks whose workers cannot take this run (a framework set up once per process for
        other peers: TensorFlow's collectives, ``raynb.train.tensorflow``): they are killed,
        their nodes fork fresh workers, and the run is queued again, as a resize: not a
        failure (unless a rank fails on the way)."""
        if run.state == RUNNING and not run.done and not run.spec.get("_awaiting_uploads"):
            run.spec["_resizing"] = True
            self.effects.emit(run, {"kind": "note", "text": why})
            self._begin_stopping(run, RESIZE, FAILING, CANCEL_GRACE_S)
        if run.state == FAILING and run.spec.get("_resizing"):
            for rank in ranks:
                if rank not in run.done and self.effects.kill_rank(run, rank):
                    run.done[rank] = "killed"
        self._maybe_all_stopped(run)

    def storage_failed(self, run: Run) -> None:
        """A file of the run could not be written (``run.write_error``: a full disk, a lost
        mount): it fails, and is not restarted (the next attempt would fail alike)."""
        if run.state in TERMINAL or run.state == CANCELLING:
            return  # ending anyway
        self._note_write_error(run)
        if run.state == PENDING:
            self._move(run, HEAD_STOPPING, FAILED)
            self._finish(run)
        elif run.state == RUNNING:
            self._begin_stopping(run, RANK_FAILED, FAILING, CANCEL_GRACE_S)
            self._maybe_all_stopped(run)

    def _note_write_error(self, run: Run) -> None:
        error = {"message": run.write_error}
        if error not in run.errors:
            run.errors.insert(0, error)  # the cause: the ranks' errors (if any) follow from it

    def no_room(self, run: Run, why: str) -> None:
        """A restarted run the remaining nodes cannot hold waited for a replacement in vain."""
        if run.state != PENDING:
            return
        self._move(run, NO_ROOM, FAILED)
        run.errors.insert(0, {"message": why})
        self._finish(run)

    def head_stopping(self, run: Run, why: str) -> None:
        """The cluster is stopping with the run active."""
        if run.state in TERMINAL:
            return
        if run.state == CANCELLING:  # its client cancelled it first (a script's SIGTERM, then its stop)
            self._move(run, HEAD_STOPPING, self._cancelled(run))
        else:
            self._move(run, HEAD_STOPPING, FAILED)
            run.errors.append({"message": why})
        self._finish(run)

    # -- internals --------------------------------------------------------------
    @staticmethod
    def _cancelled(run: Run) -> str:
        return STOPPED if run.stop_requested else CANCELLED

    def _rank_failed(self, run: Run, grace_s: float) -> None:
        if run.state == RUNNING:
            self._begin_stopping(run, RANK_FAILED, FAILING, grace_s)

    def _begin_stopping(self, run: Run, event: str, state: str, grace_s: float, cancel: bool = True) -> None:
        self._move(run, event, state)
        run.stopping_since = self.clock()
        run.deadline = run.stopping_since + grace_s
        for rank in range(len(run.ranks)):
            if cancel and rank not in run.done:
                self.effects.cancel_rank(run, rank)

    def _maybe_all_stopped(self, run: Run) -> None:
        if run.state not in (RUNNING, FAILING, CANCELLING) or len(run.done) < run.world_size:
            return
        if run.state == CANCELLING:
            self._move(run, ALL_STOPPED, self._cancelled(run))
            self._finish(run)
        elif run.state == FAILING and run.spec.pop("_resizing", None) and not run.errors:
            self._move(run, ALL_STOPPED, PENDING)
            self._new_attempt(run)
            self._requeue(run)
        elif run.state == FAILING:
            cause = primary_error(run.errors)
            run.add_failure(cause)
            this_fit = run.num_failures - run.failures_before
            policy = self.failure_policy(run)
            if run.write_error is None and policy.make_decision(this_fit) is FailureDecision.RETRY:
                self._move(run, ALL_STOPPED, PENDING)
                self._restart(run, cause, getattr(policy, "max_failures", run.max_failures))
            else:
                self._move(run, ALL_STOPPED, FAILED)
                # Name every failure (of this fit), the cause first: also with a single failure,
                # where a peer's gloo error ("connection closed by peer") often arrives before
                # the dead rank's exit and would otherwise be RunError.rank and lead the message.
                run.errors = run.failures[-this_fit:-1] + [cause] + [e for e in run.errors if e is not cause]
                self._finish(run)
        else:
            self.store.commit_checkpoints(run, run_ended=True)
            if self.store.uploading(run):  # Result.checkpoint must be in its storage URI first
                run.spec["_awaiting_uploads"] = True
                return
            run.spec.pop("_awaiting_uploads", None)
            if run.write_error is None and not os.path.isdir(run.rundir.path):  # (a stat) rm -r mid-run
                run.write_error = f"the run directory {run.rundir.path} was removed while the run ran"
            if run.write_error is not None:  # its last checkpoint or record could not be written
                self._note_write_error(run)
                self._move(run, RANK_FAILED, FAILING)
                return self._maybe_all_stopped(run)
            self._move(run, ALL_STOPPED, FINISHED)
            self._finish(run)

    def _restart(self, run: Run, cause: dict, max_failures: int) -> None:
        """Queue the run again, to start on warm workers from its latest checkpoint.

        Every rank has stopped (returned, or was killed after the grace period); a
        dead worker's replacement is already being forked by its node."""
        unsaved = unsaved_checkpoints(run)
        self._new_attempt(run)
        latest = run.store.latest
        limit = "unlimited" if max_failures < 0 else max_failures
        text = (
            f"restart {run.num_failures - run.failures_before}/{limit}: {describe_cause(cause)}; "
            + (
                f"resuming from {latest['name']}"
                if latest
                else f"no checkpoint {'saved ' if unsaved else ''}yet, starting over"
                if not run.spec.get("resume_from_checkpoint")
                else "resuming from the checkpoint it started with"
            )
            + unsaved
        )
        log.info("run %s: %s", run.name, text)
        # Read where the new attempt is placed (queue): an elastic run's resize line and
        # whether it is placed at once rather than after waiting for room.
        run.spec["_restart"] = {
            "cause": describe_cause(cause) if not cause.get("node_id") else f"node {cause['node_id']} lost",
            "why": cause.get("why") if cause.get("node_id") else None,  # (an elastic resize note's)
            "count": f"{run.num_failures - run.failures_before}/{limit}",
            "from": latest["name"] if latest else None,
        }
        self.effects.emit(run, {"kind": "note", "text": text, "restart": run.attempt, "cause": cause})
        self._requeue(run)

    def _new_attempt(self, run: Run) -> None:
        """Every rank stopped: its workers go back, its uncommitted checkpoints are dropped."""
        self.effects.release(run)
        run.store.discard_staging()
        run.staged, run.rank0_metrics, run.report_counts = {}, {}, {}
        run.attempt += 1
        run.done, run.errors, run.deadline, run.blocked = {}, [], None, set()

    def _requeue(self, run: Run) -> None:
        self.effects.emit(run, {"kind": "state", "state": PENDING, "attempt": run.attempt})
        self.store.write_state(run)
        self.effects.requeue(run)

    def _finish(self, run: Run) -> None:
        run.ended = time.time()
        self.effects.release(run)
        self.store.run_ended(run)
        self.effects.emit(run, {"kind": "state", "state": run.state, "message": error_summary(run.errors)})
        self.effects.run_ended(run)
