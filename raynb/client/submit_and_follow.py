"""Submitting one run and following it to the end, from the notebook's thread.

Shared by ``TorchTrainer.fit()``, ``%%ray_train``, Tune and ``attach``: build the
``submit_run`` message (the function shipped with cloudpickle), relay the event
stream to a view (``views.run_view``) and to the cell's output, and turn an
interrupt into a cancel on every rank (unless the interrupt is a kernel restart's:
``kernel_shutdown``). What comes back is a :class:`RunOutcome`; ``raynb.train.fit_run``
makes the ``Result`` of it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import cloudpickle

from ..cluster.protocol import messages
from ..cluster.protocol.run_states import RUN_TERMINAL as RUN_END_STATES
from ..cluster.storage.rundir import read_reports
from ..cluster.storage.storage_uri import is_storage_uri, split_storage_path
from ..errors import ClusterError, RunInterrupted
from . import bulk, followers, refollow, runtime_env
from .connection import check_head_alive, disconnect, local_head_gone
from .interrupts import CHECK_S, NotedInterrupts
from .kernel_shutdown import interrupt_is_shutdown, watch_kernel_shutdown
from .output_relay import OUTPUT_FLUSH_S, OutputRelay
from .shipping import dumps_payload, notebook_sources, sys_path_dirs

# After a cancel, how long to wait for the head to confirm every rank stopped (s).
CANCEL_WAIT_S = 5.0
# While following a run, the head is pinged after PING_EVERY_S of quiet; if nothing at
# all arrives for HEAD_SILENCE_S, the head is gone (killed, its machine down) and the
# cell fails instead of waiting forever.
PING_EVERY_S = 2.0
HEAD_SILENCE_S = 10.0


def _json_safe(value):
    try:
        return json.loads(json.dumps(value, default=repr))
    except (TypeError, ValueError):
        return repr(value)


@dataclass
class RunOutcome:
    """How a followed run ended.

    Attributes:
        record (dict): the head's ``run_done`` content (state, errors, path, metrics,
            checkpoints, failures, timings).
        reports (list[dict]): rank 0's reports, oldest first (all of them: those
            made before this process followed the run are read from its directory).
        value_frames (list): rank 0's return value, cloudpickled (empty unless FINISHED).
    """

    record: dict
    reports: list = field(default_factory=list)
    value_frames: list = field(default_factory=list)

    @property
    def state(self) -> str:
        return self.record["state"]

    def value(self):
        """Rank 0's return value (None unless the run FINISHED)."""
        if self.state == "FINISHED" and self.value_frames:
            return cloudpickle.loads(messages.buffer_bytes(self.value_frames[0]))
        return None


def _absolute(storage_path: "str | os.PathLike | None") -> str | None:
    """A relative storage path is the notebook's (its working directory), not the head's:
    the head resolved it against its own working directory (wherever the cluster was
    started), and the relative Result.path then pointed nowhere from the notebook."""
    if not storage_path:
        return storage_path
    storage_path = os.fspath(storage_path)  # a pathlib.Path too
    if "://" in storage_path:  # ValueError: a URI pyarrow.fs cannot open
        storage_path = split_storage_path(storage_path)[0]
        if storage_path is None:
            return None  # an object store's: its run directory stages on the head's default
    expanded = os.path.expanduser(storage_path)
    return expanded if os.path.isabs(expanded) else os.path.abspath(expanded)


# The trainers whose ranks need workers of a kind of their own (node/kind_zygote.py).
WORKER_KINDS = {"TensorflowTrainer": "tensorflow"}


def _run_spec(run_id: str, config, scaling_config, run_config, name_prefix: str, scope) -> dict:
    """The run's spec from its configs (as build_submission reads them) and the shared
    memory ``scope`` its payload's data went to."""
    spec = {
        "run_id": run_id,
        "name": run_config.name,
        "name_prefix": name_prefix,
        "num_workers": scaling_config.num_workers,
        "use_gpu": bool(scaling_config.use_gpu),
        # Plain types, as protocol.SCHEMAS has them (a numpy number would be refused).
        "timeout_s": None if scaling_config.timeout_s is None else float(scaling_config.timeout_s),
        "storage_path": _absolute(run_config.storage_path),
        # An object store's URI: the head uploads checkpoints there (cluster.head.uploads).
        **({"storage_uri": run_config.storage_path} if is_storage_uri(run_config.storage_path) else {}),
        "placement_strategy": getattr(scaling_config, "placement_strategy", "PACK"),
        "params": _json_safe(config if config is not None else {}),
        "cwd": os.getcwd(),
        "sys_path": sys_path_dirs(),
    }
    cpus = getattr(scaling_config, "cpus_per_worker", None)
    if cpus:  # resources_per_worker={"CPU": N}, tune.with_resources: N threads per rank
        spec["cpus_per_worker"] = cpus
    if getattr(scaling_config, "elasticity_enabled", False):  # the head places min..max (head/elastic.py)
        spec["num_workers"], spec["min_workers"] = scaling_config.max_workers, scaling_config.min_workers
        spec["elastic_resize_monitor_interval_s"] = float(scaling_config.elastic_resize_monitor_interval_s)
    cc, fc = run_config.checkpoint_config, run_config.failure_config
    if cc is not None:
        spec["checkpoint_config"] = {
            "num_to_keep": cc.num_to_keep,
            "checkpoint_score_attribute": cc.checkpoint_score_attribute,
            "checkpoint_score_order": cc.checkpoint_score_order,
        }
    if fc is not None:
        spec["max_failures"] = fc.max_failures
    if scope.used:  # written to the nodes the head places ranks on (data_needed)
        spec["shared_data"] = {"key": scope.key, "blocks": list(scope.used), "written": scope.written()}
    if name_prefix in WORKER_KINDS:  # its ranks run on workers of their own kind
        spec["worker_kind"] = WORKER_KINDS[name_prefix]
    return spec


def build_submission(
    fn,
    config,
    scaling_config,
    run_config,
    *,
    sources: dict | None = None,
    captured: dict | None = None,
    name_prefix: str = "TorchTrainer",
    extra: dict | None = None,
    data_key: str | None = None,
) -> tuple[dict, bytes]:
    """The ``submit_run`` message for ``fn``: (spec dict, cloudpickled payload bytes).

    ``scaling_config`` and ``run_config`` are ``raynb.train``'s ``ScalingConfig`` and
    ``RunConfig`` (read by attribute: num_workers, use_gpu, timeout_s; name,
    storage_path, checkpoint_config, failure_config).

    ``spec["run_id"]`` is a fresh id; ``extra`` keys are added to the spec (e.g.
    ``resume_from_checkpoint``). Datasets and large captured arrays in the payload go
    to shared memory under ``data_key`` (``client.bulk``; the run id when None).

    Raises:
        UnpicklableError: something ``fn`` reads cannot be shipped; nothing was sent.
        ValueError: the payload is over the message size limit.
        MemoryError: the data does not fit in this node's free shared memory (``/dev/shm``).
    """
    all_sources = notebook_sources()
    all_sources.update(sources or {})
    run_id = uuid.uuid4().hex
    with bulk.active(data_key or run_id) as scope:
        try:
            payload = dumps_payload(fn, config, all_sources, captured)  # raises before anything ships
        except BaseException:
            if data_key is None:
                bulk.forget(run_id)  # what this run's pickling wrote to shared memory
            raise
    limit = messages.max_message_bytes() - (1 << 20)
    if len(payload) > limit:
        if data_key is None:
            bulk.forget(run_id)
        raise ValueError(
            f"the training function and what it reads pickle to {len(payload) / 2**20:.0f} MiB, over "
            f"the {limit / 2**20:.0f} MiB a message may carry. Load large data inside the function "
            "(from a file every worker can read), or raise RAYNB_MAX_MESSAGE_BYTES before `raynb start`."
        )
    spec = _run_spec(run_id, config, scaling_config, run_config, name_prefix, scope)
    runtime_env.apply(spec)  # raynb.init(runtime_env={"working_dir": ...})
    spec.update(extra or {})
    return spec, payload


def submit_run(client, spec: dict, payload: bytes) -> str:
    """Send a ``submit_run`` and return the run's name once the head accepted it
    (raises as :func:`submit_run_accepted`)."""
    return submit_run_accepted(client, spec, payload)["name"]


def submit_run_accepted(client, spec: dict, payload: bytes) -> dict:
    """Send a ``submit_run`` and return the head's ``run_accepted`` content once it
    accepted the run: ``run_id``, ``name`` and ``path`` (the run directory).

    Raises:
        ValueError: the head refused the run (the message says why).
        ClusterError: the head did not answer (this process's connection is dropped).
        RunInterrupted: (a KeyboardInterrupt) interrupted before the head answered; the run, if it
            was accepted, is cancelled by id.
    """
    try:
        accepted = client.request(
            messages.SUBMIT_RUN, spec, reply_types=(messages.RUN_ACCEPTED,), buffers=[payload]
        )
    except (KeyboardInterrupt, SystemExit) as e:  # before the head's answer: the run may exist already
        cancel_unfollowed(client, spec["run_id"], e, "while submitting the run")
    except ClusterError:
        disconnect()  # the head is gone: the next run attaches afresh, as connect() does
        raise
    if accepted.msg_type == messages.ERROR:
        raise ValueError(accepted.content.get("message", "the head refused the run"))
    return accepted.content


def cancel_unfollowed(client, run_id: str, exc: BaseException, when: str) -> None:
    """An interrupt or a script's exit (``script_exit``) before the run was followed: the run
    cancelled by id (else nobody follows it), but not when the kernel is restarting.

    Raises:
        RunInterrupted: for a ``KeyboardInterrupt`` (the run was cancelled); ``exc`` itself else."""
    if isinstance(exc, KeyboardInterrupt) and interrupt_is_shutdown():
        raise exc
    client.send(messages.CANCEL_RUN, {"run_id": run_id})
    if isinstance(exc, SystemExit):
        raise exc  # the script is ending, and its run with it
    raise RunInterrupted(f"interrupted {when}; it was cancelled") from None


def follow_run(
    client,
    run_id: str,
    display,
    all_ranks: bool = False,
    reports: list | None = None,
    cancel_on_interrupt: bool = True,
    name: str | None = None,
    path: str | None = None,
) -> RunOutcome:
    """Relay a submitted or attached run's events to ``display`` until it ends.

    ``name`` (the run's) is for the messages only; ``path`` (the run directory) is
    named where the cell stops showing output.

    Returns:
        The run's :class:`RunOutcome` (also for a failed run); ``display`` is finished.

    Raises:
        RunInterrupted: (a KeyboardInterrupt) interrupted; with ``cancel_on_interrupt`` every
            rank was cancelled first, without it (an attached run) this only detaches. A
            kernel restart or shutdown (Jupyter's buttons) only detaches: the run goes on.
        ClusterError: the head stopped answering (this process's connection is
            dropped), or the local head's process is gone (the next ``get_client()``
            says so and starts a new cluster).
    """
    reports = reports if reports is not None else []
    watch_kernel_shutdown()
    try:
        done = _follow(
            client, run_id, display, reports, OutputRelay(all_ranks, path), cancel_on_interrupt, name
        )
    except SystemExit:  # the script is ending (script_exit.py): a run it started ends too
        if cancel_on_interrupt:
            client.send(messages.CANCEL_RUN, {"run_id": run_id})
        raise
    except ClusterError:
        display.finish()  # leave the pane's last state, not a frozen live widget
        if local_head_gone(client) is None:
            disconnect()  # else kept: the next get_client() names the dead head and replaces it
        raise
    c = done.content
    if len(reports) < c.get("num_reports", 0):
        try:
            # Reports from before this client followed the run (a resumed run's earlier
            # attempts): the run directory has them all.
            on_disk = read_reports(Path(c["path"]))
        except Exception:  # noqa: BLE001 - a remote head's directory may not be readable here
            on_disk = []
        if len(on_disk) > len(reports):
            reports = on_disk
    display.finish()
    return RunOutcome(c, reports, list(done.buffers))


def _follow(client, run_id, display, reports, relay, cancel_on_interrupt=True, name=None) -> messages.Message:
    """Relay the run's events until it ends; an interrupt cancels it on every rank."""
    with NotedInterrupts() as interrupts:
        return _follow_loop(client, run_id, display, reports, relay, cancel_on_interrupt, name, interrupts)


def _follow_loop(
    client, run_id, display, reports, relay, cancel_on_interrupt, name, interrupts: NotedInterrupts
) -> messages.Message:
    """Follow run ``run_id`` to its ``run_done`` (returned): events to ``display``, rank 0's
    reports to ``reports``, output through ``relay``; a Ctrl-C cancels the run on every rank
    (``cancel_on_interrupt``) and raises :class:`RunInterrupted` once the head confirms."""
    return RunFollower(client, run_id, display, reports, relay, cancel_on_interrupt, name, interrupts).run()


class RunFollower:
    """The state of one run being followed: its three clocks (when the head was last heard
    from, when a remote head was last re-attached, when a cancel was sent) and the end of
    the current wait, which is polled in slices (interrupts.CHECK_S) so a swallowed Ctrl-C
    is still seen. The connection's follower while it runs (``followers.py``): the client's
    handler table hands it the run's messages."""

    def __init__(self, client, run_id, display, reports, relay, cancel_on_interrupt, name, interrupts):
        self.client, self.run_id, self.display, self.reports, self.relay = (
            client,
            run_id,
            display,
            reports,
            relay,
        )
        self.cancel_on_interrupt, self.name, self.interrupts = cancel_on_interrupt, name, interrupts
        self.cancel_sent_at = None
        self.last_heard = self.last_reattach = time.monotonic()
        self.wait_until = None
        self.done: messages.Message | None = None

    def run(self) -> messages.Message:
        """Wait until the run's ``run_done`` was handled; returns it."""
        with followers.following(self.client, self):
            while self.done is None:
                try:
                    self._wait()
                except KeyboardInterrupt as e:
                    self._on_interrupt(e)
        return self.done

    def _wait(self) -> None:
        """One slice of the wait: a message (handled in ``recv``, through the client's
        table), the silence of a whole wait, or neither yet."""
        if self.wait_until is None:
            self.wait_until = time.monotonic() + self._timeout()
        # A Ctrl-C that pyzmq swallowed, noted while the last message was received: raised
        # once that message was handled (a run_done in hand is never dropped for it).
        self.interrupts.raise_noted()
        msg = self.client.recv(max(0.0, min(self.wait_until - time.monotonic(), CHECK_S)))
        now = time.monotonic()
        if msg is None and now < self.wait_until:
            return
        self.wait_until = None
        if msg is None:
            self._on_silence(now)
        else:
            self.last_heard = now

    def _timeout(self) -> float:
        timeout = (
            PING_EVERY_S
            if self.cancel_sent_at is None
            else max(0.0, min(PING_EVERY_S, CANCEL_WAIT_S - (time.monotonic() - self.cancel_sent_at)))
        )
        if self.relay.pending:  # output waits at most OUTPUT_FLUSH_S for more to join it
            timeout = min(timeout, OUTPUT_FLUSH_S)
        return timeout

    def _on_silence(self, now: float) -> None:
        """Nothing came for a whole wait: flush output, ping, re-attach, or give up."""
        client = self.client
        if self.relay.pending:
            self.relay.flush()
            return
        check_head_alive(client)
        if self.cancel_sent_at is not None and now - self.cancel_sent_at >= CANCEL_WAIT_S:
            raise ClusterError(
                f"the head did not confirm the cancel within {CANCEL_WAIT_S:.0f}s; check `raynb status`"
            )
        silent = now - self.last_heard
        if silent >= HEAD_SILENCE_S and client.local_token is None and silent < refollow.reconnect_s():
            if now - self.last_reattach >= HEAD_SILENCE_S:  # a remote head: attach again
                refollow.reattach(client, self.run_id)
                self.last_reattach = now
            client.send(messages.PING)
            return
        if silent >= HEAD_SILENCE_S:
            raise ClusterError(
                f"lost contact with the raynb head at {client.address}: no answer for "
                f"{silent:.0f}s while this run was active (was the cluster killed "
                "or its machine lost?); check `raynb status`"
            )
        client.send(messages.PING)

    # -- the run's messages (the client's handler table, followers.py) -----------------
    def on_run_record(self, msg: messages.Message) -> None:
        """The run's record, re-attached after a silence: a run that ended meanwhile ends here."""
        if msg.content.get("record", {}).get("run_id") != self.run_id:
            return
        done = refollow.on_record(msg, self.reports)
        if done is not None:
            self.on_run_done(done)

    def on_run_done(self, msg: messages.Message) -> None:
        """The run ended: it is done (or, after a cancel, interrupted)."""
        if msg.content.get("run_id") != self.run_id:
            return
        self.relay.end(msg.content.get("path"))
        if self.cancel_sent_at is not None:
            state = msg.content["state"]
            self.display.handle({"kind": "state", "state": state, "time": time.time()})
            self.display.finish()
            raise RunInterrupted(
                f"run {msg.content['name']!r} cancelled on every rank"
                if state == "CANCELLED"
                else f"run {msg.content['name']!r} had ended ({state}) when it was interrupted"
            )
        self.done = msg

    def on_run_event(self, msg: messages.Message) -> None:
        """One event of the run: output to the relay, rank 0's reports kept, all shown."""
        if msg.content.get("run_id") != self.run_id:
            return
        event = msg.content["event"]
        if event.get("kind") == "output":
            self.relay.write(event)
        elif event.get("kind") == "state" and event.get("state") in RUN_END_STATES:
            self.relay.end()  # the last lines (and what was not shown) before the end's line
        else:
            self.relay.flush()  # the output printed before a report or state shows before it
            if event.get("kind") == "report" and event.get("rank") == 0:
                self.reports.append(event["metrics"])
        self.display.handle(event)

    def _on_interrupt(self, e: KeyboardInterrupt) -> None:
        """A Ctrl-C: the first sends the cancel; what else it means depends on the moment."""
        self.interrupts.handled()
        self.wait_until = None
        if isinstance(e, RunInterrupted):
            raise e
        if not self.cancel_on_interrupt:
            raise RunInterrupted("stopped following the run; it goes on") from None
        if self.cancel_sent_at is not None:  # a second interrupt: stop waiting for the confirmation
            raise RunInterrupted(
                "interrupted again while waiting for the ranks to stop; the "
                "head still cancels the run (`raynb status` shows it)"
            ) from None
        if interrupt_is_shutdown():
            self.relay.end()
            self.display.finish()
            name = self.name
            what, call = (
                (f"run {name!r}", f"raynb.attach({name!r})") if name else ("the run", "raynb.attach(name)")
            )
            raise RunInterrupted(
                f"the kernel is shutting down; {what} keeps running on the cluster ({call} follows it again)"
            ) from None
        self.client.send(messages.CANCEL_RUN, {"run_id": self.run_id})
        self.cancel_sent_at = time.monotonic()
        self.interrupts.handled()  # a second one caught meanwhile (interrupt_is_shutdown's wait) is this one
