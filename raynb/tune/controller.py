"""The Tune driver loop: trials as raynb runs on the warm pool, decided by a scheduler.

One thread, one connection: trials are submitted with ``SUBMIT_RUN`` and their events
multiplexed on ``client.recv`` by ``run_id``. The loop blocks on the socket only, with no
per-event sleeps; after each batch of messages it fills the free worker slots, writes the
experiment state (if a trial's state changed) and lets the table redraw (throttled there).

Ray Tune's ``TuneController`` is the reference for the order of the callbacks.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..client import followers
from ..client.interrupts import NotedInterrupts
from ..client.submit_and_follow import HEAD_SILENCE_S, PING_EVERY_S, build_submission
from ..cluster.protocol import messages
from ..cluster.storage.rundir import STATE_FILE as RUN_STATE_FILE
from ..errors import ClusterError
from ..train.config import RunConfig
from ..train.fit_with_callbacks import first_error_line
from . import checkpoint_requests
from .experiment_state import ExperimentState
from .held_stops import HeldStops
from .report_history import truncate_reports
from .result_grid import AUTO_KEYS
from .schedulers.trial_scheduler import CONTINUE, STOP, Exploit
from .search.searcher import Searcher
from .trial import ERROR, PAUSED, PENDING, RUNNING, TERMINATED, Trial, pause
from .trial_output import relay_output
from .trial_setup import TrialSetup, adopt_first_checkpoint, newest_checkpoint, write_params
from .trial_working_dir import in_trial_dir

# After an interrupt or a fatal error, how long to wait for cancelled trials to end (s).
# The head kills ranks that ignore the cancel after 1 s, so this is rarely reached.
INTERRUPT_WAIT_S = 2.0
# Messages handled per batch before the loop fills free slots again.
BATCH = 256


class TuneController:
    """Runs an experiment's trials to the end (or the time budget, or an interrupt).

    After :meth:`run`, ``trials`` holds every trial with its final status and
    ``interrupted`` says whether Ctrl-C (or :meth:`interrupt`) cut it short.
    """

    def __init__(
        self,
        *,
        client,
        runner: TrialSetup,
        trials: list[Trial],
        search_alg: Searcher,
        scheduler,
        metric: str | None,
        mode: str | None,
        num_samples: int,
        concurrency: int,
        total_workers: int,
        time_budget_s: float | None,
        experiment_path: str,
        exp_id: str,
        state: ExperimentState,
        progress,
        display,
        search_finished: bool,
        verbose: int,
        callbacks,
    ):
        self.client, self.runner, self.trials = client, runner, trials
        self.search_alg, self.scheduler, self.metric, self.mode = search_alg, scheduler, metric, mode
        self.num_samples, self.concurrency, self.total_workers = num_samples, concurrency, total_workers
        self.time_budget_s, self.experiment_path, self.exp_id = time_budget_s, experiment_path, exp_id
        self.state, self.progress, self.display, self.verbose = state, progress, display, verbose
        self.search_finished, self.callbacks = search_finished, callbacks  # a CallbackList: post-only, O(1)
        self.interrupted = False
        self._interrupt_requested = False
        self._by_run: dict[str, Trial] = {}
        self._pending: list[Trial] = [t for t in trials if t.status == PENDING]
        self._stop_freed: list[float] = []  # times of STOP decisions whose worker is free again
        self._last_heard = time.monotonic()
        self._budget_hit = False
        self._held_stops = HeldStops(
            lambda run_id: client.send(messages.CANCEL_RUN, {"run_id": run_id, "reason": "stop"}),
            progress.note,
        )

    # -- public ---------------------------------------------------------------------------
    def interrupt(self) -> None:
        """Ask the loop to stop every running trial and return, as Ctrl-C does (any thread)."""
        self._interrupt_requested = True

    def run(self) -> None:
        """Run until every trial has ended, the time budget is spent, or an interrupt.

        Raises:
            ValueError: a trial reported without the metric (naming the keys it reported).
            ClusterError: the head stopped answering.
            Exception: whatever a scheduler or searcher raised; running trials are cancelled first.
        """
        deadline = time.monotonic() + self.time_budget_s if self.time_budget_s else None
        # A Ctrl-C that pyzmq swallowed ends the loop too; the client's handler table hands
        # this controller its trials' run messages wherever it waits (followers.py).
        with NotedInterrupts(self.interrupt), followers.following(self.client, self):
            try:
                self._create_trials()
                self._fill()
                self._flush()
                while self._work_left():
                    if self._interrupt_requested:
                        raise KeyboardInterrupt
                    reason = None if self._budget_hit else self._end_reason(deadline)
                    if reason:
                        self._time_budget_reached(reason)
                    self._held_stops.release_due()
                    if not self._by_run:
                        if self._start_more_or_end():
                            break
                        continue
                    self._wait_and_handle(deadline)
            except KeyboardInterrupt:
                self._cancel_all(PAUSED)
                self.interrupted = True
            except BaseException:
                self._cancel_all(PAUSED)
                raise
            finally:
                self._flush()

    def _work_left(self) -> bool:
        """Whether run()'s loop goes on: a trial runs, or one may still start or be created."""
        return bool(
            self._by_run
            or (self._pending and not self._budget_hit)
            or (not self.search_finished and not self._budget_hit)
        )

    def _start_more_or_end(self) -> bool:
        """With no trial running: start pending ones. True when the loop should end.

        Raises:
            RuntimeError: nothing can start though trials are pending or the search is not
                finished (a scheduler or searcher that would wait forever).
        """
        if self._budget_hit:
            return True
        self._fill()
        if not self._by_run:
            if self._pending:
                raise RuntimeError(
                    f"{self.scheduler.__class__.__name__}.choose_trial_to_run() "
                    f"picked none of "
                    f"{len(self._pending)} pending trials while none was running"
                )
            if self.search_finished:
                return True
            raise RuntimeError(
                f"{type(self.search_alg).__name__}.suggest() returned None while no trial "
                "was running: it waits for results that can never come"
            )
        self._flush()
        return False

    def _wait_and_handle(self, deadline: float | None) -> None:
        """One turn of run()'s loop with trials running: wait for messages (until the next
        ping, the deadline or a quarter second), handle a batch of them, start and flush."""
        timeout = PING_EVERY_S
        if deadline is not None and not self._budget_hit:
            timeout = max(0.0, min(timeout, deadline - time.monotonic()))
        if self._interrupt_requested:
            timeout = 0.0
        # Wake at least every 0.25 s: the table's clock, interrupt() (another thread's,
        # a noted Ctrl-C).
        msg = self.client.recv(min(timeout, 0.25))
        if msg is None:
            self._quiet()
        else:
            self._heard(msg)
            for _ in range(BATCH):
                msg = self.client.recv(0)
                if msg is None:
                    break
                self._heard(msg)
        if not self._budget_hit:
            self._fill()
        self._flush()

    # -- trials ---------------------------------------------------------------------------
    def _can_create(self) -> bool:
        if self.search_finished:
            return False
        if (
            not self.search_alg.counts_samples
            and self.num_samples >= 0
            and len(self.trials) >= self.num_samples
        ):
            self.search_finished = True
            return False
        return True

    def _create_trials(self) -> int:
        """Create trials from the search algorithm: all of them if it is eager, else one per
        free slot. Returns how many were created."""
        made = 0
        while self._can_create():
            if not self.search_alg.eager and len(self._pending) >= self.concurrency - len(self._by_run):
                break
            trial_id = f"{self.exp_id}_{len(self.trials):05d}"
            config = self.search_alg.suggest(trial_id)
            if config == Searcher.FINISHED:
                self.search_finished = True
                break
            if config is None:
                break
            trial = self.runner.new_trial(trial_id, config, self.experiment_path)  # its name and directory
            self.trials.append(trial)
            self._pending.append(trial)
            self.scheduler.on_trial_add(trial)
            self.progress.add_trial(trial_id, trial.config)
            self.state.mark(trial)
            made += 1
        return made

    def _fill(self) -> None:
        """Start pending trials while there are free slots."""
        while len(self._by_run) < self.concurrency:
            if not self._pending and not self._create_trials():
                return
            trial = self.scheduler.choose_trial_to_run(self._pending)
            if trial is None:
                return
            self._pending.remove(trial)
            self._start(trial)

    def _start(self, trial: Trial) -> None:
        r = self.runner
        rc = r.run_config
        # A trial whose run directory exists (PBT's exploit, a restored trial with a checkpoint)
        # continues that run; each trial names its experiment, for raynb.runs(experiment=...).
        resume = {"resume": True} if trial.path and (Path(trial.path) / RUN_STATE_FILE).exists() else {}
        extra = {"experiment": Path(self.experiment_path).name, **resume}
        spec, payload = build_submission(
            r.fn,
            r.fn_config(trial.config),
            r.scaling_config,
            RunConfig(
                name=trial.extra["dirname"],
                storage_path=self.experiment_path,
                verbose=0,
                checkpoint_config=rc.checkpoint_config,
                failure_config=rc.failure_config,
            ),
            name_prefix=r.name_prefix,
            extra=extra,
            data_key=r.data_key,
        )
        in_trial_dir(spec, trial.path or str(Path(self.experiment_path) / trial.extra["dirname"]))
        trial.run_id = spec["run_id"]
        trial.status = RUNNING
        trial.extra["submitted_at"] = time.time()
        if self._stop_freed:
            trial.extra["freed_by_stop_at"] = self._stop_freed.pop(0)
        self._by_run[trial.run_id] = trial
        self.client.send(messages.SUBMIT_RUN, spec, buffers=[payload])
        self.progress.set_status(trial.trial_id, RUNNING)
        self.state.mark(trial)
        self._workers_changed()
        self.callbacks.on_trial_start(trial)

    def _workers_changed(self) -> None:
        sc = self.runner.scaling_config
        self.progress.set_workers(
            len(self._by_run) * getattr(sc, "max_workers", sc.num_workers), self.total_workers
        )

    # -- events ---------------------------------------------------------------------------
    def _heard(self, msg: messages.Message) -> None:
        """A message from the head, its trials' run messages already handled (``on_run_*``,
        through the client's handler table): the head is alive; an ``error`` is the answer to
        a trial's ``submit_run``: the head refused the run."""
        self._last_heard = time.monotonic()
        if msg.msg_type == messages.ERROR:
            trial = self._by_run.get(msg.content.get("run_id"))
            if trial is not None:
                self._on_done(trial, {"state": "FAILED", "errors": [{"message": msg.content.get("message")}]})

    def on_run_done(self, msg: messages.Message) -> None:
        """A trial's run ended."""
        trial = self._by_run.get(msg.content.get("run_id"))
        if trial is not None:
            self._on_done(trial, msg.content)

    def on_run_record(self, msg: messages.Message) -> None:
        """A run's record: Tune never re-attaches, its trials' records are not read here."""

    def on_run_event(self, msg: messages.Message) -> None:
        """One event of a trial's run: rank 0's report decided on, a checkpoint kept, output
        relayed, a note shown."""
        trial = self._by_run.get(msg.content.get("run_id"))
        if trial is None:
            return
        event = msg.content["event"]
        kind = event.get("kind")
        if kind == "report":
            if event.get("rank") == 0:
                self._on_report(trial, event["metrics"], bool(event.get("checkpoint_staged")))
        elif kind == "state":
            if event.get("state") == "RUNNING":
                trial.extra["started_at"] = event.get("time")
        elif kind == "checkpoint":
            trial.checkpoint = event.get("path")
            self._held_stops.committed(trial.run_id, (event.get("metrics") or {}).get("training_iteration"))
            self.state.mark(trial)
            self.callbacks.on_checkpoint(trial, trial.checkpoint)
        elif kind == "output":
            if event.get("rank") == 0 and self.verbose:
                relay_output(trial.trial_id, event)
        elif kind == "note":
            if event.get("restart") is not None:  # a held STOP's checkpoint went with the failed attempt
                self._held_stops.release(trial.run_id)
            if event.get("text"):
                self.progress.note(f"{trial.trial_id}: {event['text']}")

    def _on_report(self, trial: Trial, metrics: dict, checkpoint_staged: bool = False) -> None:
        ending = trial.extra.get("_ending")
        if ending in ("stop", "budget"):
            # Made before the STOP reached the run: as in Ray, the trial's results end where
            # it was stopped (its files are cut back to them when it ends: _on_done).
            return
        metrics["trial_id"] = trial.trial_id
        # Reports after an exploit or interrupt are kept: the resumed run counts them.
        trial.results.append(metrics)
        self.progress.add_result(trial.trial_id, metrics)
        self.callbacks.on_trial_result(trial, metrics)
        if ending:
            return
        if self.metric is not None and self.metric not in metrics:
            self._missing_metric(trial, metrics)
        self.search_alg.on_trial_result(trial.trial_id, metrics)
        decision = self.scheduler.on_trial_result(trial, metrics)
        if decision == CONTINUE or decision is None:
            return
        if decision == STOP:
            trial.extra["_ending"] = "stop"
            trial.extra["stop_requested_at"] = time.time()
            trial.extra["_completed"] = self.scheduler.reached_budget(trial, metrics)
        elif isinstance(decision, Exploit):
            trial.extra["_ending"] = "exploit"
            trial.extra["_exploit"] = decision
        else:
            raise ValueError(
                f"{self.scheduler.__class__.__name__}.on_trial_result returned {decision!r}; "
                "expected CONTINUE, STOP or an Exploit"
            )
        if decision == STOP and checkpoint_staged:  # sent once that report's checkpoint commits
            self._held_stops.hold(trial.run_id, trial.trial_id, metrics.get("training_iteration", 0))
            return
        self.client.send(
            messages.CANCEL_RUN, {"run_id": trial.run_id, "reason": "stop" if decision == STOP else None}
        )

    def _missing_metric(self, trial: Trial, metrics: dict) -> None:
        keys = sorted(k for k in metrics if k not in AUTO_KEYS)
        raise ValueError(
            f"trial {trial.trial_id} reported {keys} (plus the automatic {list(AUTO_KEYS[:3])}) "
            f"without the metric {self.metric!r} named in TuneConfig(metric=...). Include it in "
            f"every raynb.tune.report({{{self.metric!r}: ...}}), or set metric= to one of {keys}"
        )

    def _on_done(self, trial: Trial, c: dict) -> None:
        self._by_run.pop(trial.run_id, None)
        if c.get("checkpoint"):
            trial.checkpoint = c["checkpoint"]
        for key in ("checkpoints", "checkpoint_config", "failures"):  # for the trial's Result
            if c.get(key):
                trial.extra[key] = c[key]
        state = c.get("state")
        held = self._held_stops.ended(trial.run_id, failed=state == "FAILED")  # a STOP, as in Ray
        ending = trial.extra.pop("_ending", None)
        trial.extra["ended_at"] = time.time()
        if ending == "exploit" and state != "FAILED":
            self._exploit(trial, trial.extra.pop("_exploit"))
        elif ending in ("stop", "budget") and (state != "FAILED" or held):
            # Stopped by the scheduler, a stopper or the time budget: TERMINATED (Ray's), even
            # when its run returned before the cancel landed (its results end at the STOP);
            # "early_stopped" is False for a trial stopped at its whole budget (max_t).
            trial.extra["early_stopped"] = not (trial.extra.pop("_completed", False) and ending == "stop")
            trial.status = TERMINATED
            # Its run's files hold the reports that raced the STOP too: not the trial's.
            truncate_reports(trial.path, len(trial.results))
            if ending == "stop":
                self._stop_freed.append(trial.extra["stop_requested_at"])
            self.scheduler.on_trial_complete(trial, trial.last_result)
            self.search_alg.on_trial_complete(trial.trial_id, trial.last_result)
        elif ending == "interrupt" and state != "FAILED":
            trial.status = TERMINATED if state == "FINISHED" else pause(trial)
            if trial.status == TERMINATED:
                self.scheduler.on_trial_complete(trial, trial.last_result)
                self.search_alg.on_trial_complete(trial.trial_id, trial.last_result)
        elif state == "FINISHED":
            trial.status = TERMINATED
            self.scheduler.on_trial_complete(trial, trial.last_result)
            self.search_alg.on_trial_complete(trial.trial_id, trial.last_result)
        else:
            errors = c.get("errors") or [{"message": f"the run ended {state}"}]
            if state == "CANCELLED":
                errors = [{"message": "cancelled outside Tune (raynb stop, or a cancel from another client)"}]
            trial.status = ERROR
            trial.error = first_error_line(errors)
            trial.extra["errors"] = errors
            self.scheduler.on_trial_error(trial)
            self.search_alg.on_trial_complete(trial.trial_id, trial.last_result or None, error=True)
        trial.extra.pop("_exploit", None)
        self.progress.set_status(
            trial.trial_id, trial.status, trial.error, bool(trial.extra.get("early_stopped"))
        )
        self.state.mark(trial)
        self._workers_changed()
        self.callbacks.on_trial_end(trial)  # complete (TERMINATED) or error (ERROR)

    def _exploit(self, trial: Trial, decision: Exploit) -> None:
        """PBT (Jaderberg et al. 2017, "Population Based Training of Neural Networks"): copy
        the donor's checkpoint into this trial's run as its newest checkpoint, take the
        explored config, and queue the trial first; it then resumes its run from that
        checkpoint."""
        trial.status = PENDING
        self._pending.insert(0, trial)
        if decision.checkpoint:
            donor = next((t for t in self.trials if t.trial_id == decision.donor_id), None)
            # The donor ran on meanwhile: num_to_keep may have pruned that checkpoint; its
            # newest one is as good a copy of its weights.
            # And it may be pruned while it is being copied (the donor's next report, with
            # num_to_keep=1): then shutil.Error, which ended the whole fit(). Each failed copy
            # is one more pruned source; the donor's newest, read afresh from its run.json,
            # is tried next.
            sources = [decision.checkpoint] + ([donor.checkpoint] if donor and donor.checkpoint else [])
            sources += [lambda: newest_checkpoint(donor.path if donor else None)] * 3
            adopted = adopt_first_checkpoint(
                trial.path,
                sources,
                self.runner.run_config.checkpoint_config,
                {"donor_trial_id": decision.donor_id},
            )
            if adopted is None:
                self.progress.note(
                    f"PBT: {decision.donor_id}'s checkpoint is gone; {trial.trial_id} continues as it was"
                )
                return
            trial.checkpoint = adopted["path"]
            trial.extra["exploits"] = trial.extra.get("exploits", 0) + 1
        trial.config = decision.config
        write_params(trial.path, self.runner.fn_config(trial.config))
        self.progress.add_trial(trial.trial_id, trial.config)
        self.progress.note(
            f"PBT: {trial.trial_id} continues from {decision.donor_id}'s checkpoint with a perturbed config"
        )

    # -- the rest ---------------------------------------------------------------------------
    def _quiet(self) -> None:
        """Nothing arrived for a while: ping the head; fail if it has been silent too long."""
        now = time.monotonic()
        if self._by_run and now - self._last_heard >= HEAD_SILENCE_S:
            raise ClusterError(
                f"lost contact with the raynb head at {self.client.address}: no answer for "
                f"{now - self._last_heard:.0f}s while trials were running; check `raynb status`"
            )
        if now - self._last_heard >= PING_EVERY_S:
            self.client.send(messages.PING)

    def _end_reason(self, deadline: float | None) -> str | None:
        """Why the experiment ends now (the time budget, a stopper's stop_all(), fail_fast), or None."""
        if deadline is not None and time.monotonic() >= deadline:
            return f"time budget of {self.time_budget_s:g}s reached"
        check = getattr(self.scheduler, "experiment_stop_reason", None)  # tune.stopping.StoppingScheduler
        return check() if check is not None else None

    def _time_budget_reached(self, reason: str) -> None:
        self._budget_hit = True
        self.progress.note(
            f"{reason}: running trials stopped, {len(self._pending)} pending trial(s) not started"
        )
        self._held_stops.release_all()
        for trial in list(self._by_run.values()):
            if not trial.extra.get("_ending"):
                trial.extra["_ending"] = "budget"
                self.client.send(messages.CANCEL_RUN, {"run_id": trial.run_id, "reason": "stop"})

    def _cancel_all(self, status_after: str) -> None:
        """Cancel every running trial and wait (at most INTERRUPT_WAIT_S) for the head to
        confirm; trials that were running end ``status_after`` (PAUSED: resumable)."""
        self._held_stops.release_all()  # their cancels say "stop": the runs end STOPPED
        for trial in list(self._by_run.values()):
            if trial.extra.get("_ending") not in ("stop", "budget"):
                trial.extra["_ending"] = "interrupt"
            self.client.send(messages.CANCEL_RUN, {"run_id": trial.run_id})
        deadline = time.monotonic() + INTERRUPT_WAIT_S
        try:
            while self._by_run and time.monotonic() < deadline:
                msg = self.client.recv(max(0.0, deadline - time.monotonic()))
                if msg is not None:  # its reports still in flight are handled too: the run's files hold them
                    self._heard(msg)
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: stop waiting; the head still ends the runs
        for trial in list(self._by_run.values()):
            self._by_run.pop(trial.run_id, None)
            trial.extra.pop("_ending", None)
            trial.status = status_after if status_after != PAUSED else pause(trial)
            self.progress.set_status(trial.trial_id, trial.status)
            self.state.mark(trial)

    def _flush(self) -> None:
        checkpoint_requests.ask(
            getattr(self.callbacks, "checkpoint_requests", None), self._by_run, self.runner, self.client
        )
        if self.state.dirty:
            self.state.write(created=len(self.trials), search_finished=self.search_finished)
        self.display.update()
