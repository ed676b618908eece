"""Submitting one run and following it to the end, from the notebook's thread.

Shared by ``TorchTrainer.fit()`` and ``%%ray_train``: ship the function, relay
the event stream to the progress pane and to the cell's output, turn an
interrupt into a cancel on every rank, and build the ``Result``.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from pathlib import Path

import cloudpickle

from . import protocol as P
from .client import disconnect, get_client
from .errors import ClusterError
from .shipping import dumps_payload, notebook_sources
from .train.config import RunConfig, ScalingConfig

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


def _total_epochs(config, epochs):
    if epochs:
        return int(epochs)
    if isinstance(config, dict) and isinstance(config.get("epochs"), int):
        return config["epochs"]
    return None


def _make_display(name, world_size, total_epochs, verbose):
    from .display import NullProgress, progress_display
    from .progress import RunProgress

    progress = RunProgress(name, world_size, total_epochs=total_epochs)
    display = progress_display(progress) if verbose else NullProgress(progress)
    display.display()
    return display


class _OutputRelay:
    """Writes the ranks' output to the cell's stdout / stderr, each line tagged ``(rank N)``.

    A rank's unfinished line (``print(".", end="", flush=True)``) is continued
    without a second tag, and ended before another rank's output starts there.
    """

    def __init__(self, all_ranks: bool):
        self.all_ranks = all_ranks
        self._open: dict[str, int] = {}  # stream name -> rank whose line is unfinished

    @staticmethod
    def _stream(name: str):
        return sys.stderr if name == "stderr" else sys.stdout

    def write(self, event: dict) -> None:
        rank = event.get("rank")
        if rank != 0 and not self.all_ranks:
            return
        name = "stderr" if event.get("stream") == "stderr" else "stdout"
        text = event.get("text", "")
        if not text:
            return
        open_rank = self._open.pop(name, None)
        out = "\n" if open_rank is not None and open_rank != rank else ""
        for piece in re.findall(r"[^\n]*\n|[^\n]+", text):
            out += piece if open_rank == rank else f"(rank {rank}) {piece}"
            open_rank = None if piece.endswith("\n") else rank
        if open_rank is not None:
            self._open[name] = open_rank
        stream = self._stream(name)
        stream.write(out)
        stream.flush()

    def end(self) -> None:
        """End unfinished lines, so what the cell prints next starts on its own line."""
        for name in list(self._open):
            del self._open[name]
            self._stream(name).write("\n")
            self._stream(name).flush()


def _absolute(storage_path: str | None) -> str | None:
    """A relative storage path is the notebook's (its working directory), not the head's:
    the head resolved it against its own working directory (wherever the cluster was
    started), and the relative Result.path then pointed nowhere from the notebook."""
    if not storage_path:
        return storage_path
    expanded = os.path.expanduser(storage_path)
    return expanded if os.path.isabs(expanded) else os.path.abspath(expanded)


def build_submission(fn, config, scaling_config: ScalingConfig, run_config: RunConfig, *,
                     sources: dict | None = None, captured: dict | None = None,
                     name_prefix: str = "TorchTrainer", extra: dict | None = None) -> tuple[dict, bytes]:
    """The ``submit_run`` message for ``fn``: (spec dict, cloudpickled payload bytes).

    ``spec["run_id"]`` is a fresh id; ``extra`` keys are added to the spec (e.g.
    ``resume_from_checkpoint``).

    Raises:
        UnpicklableError: something ``fn`` reads cannot be shipped; nothing was sent.
        ValueError: the payload is over the message size limit.
    """
    all_sources = notebook_sources()
    all_sources.update(sources or {})
    payload = dumps_payload(fn, config, all_sources, captured)  # raises before anything ships
    limit = P.max_message_bytes() - (1 << 20)
    if len(payload) > limit:
        raise ValueError(
            f"the training function and what it reads pickle to {len(payload) / 2**20:.0f} MiB, over "
            f"the {limit / 2**20:.0f} MiB a message may carry. Load large data inside the function "
            "(from a file every worker can read), or raise RAYNB_MAX_MESSAGE_BYTES before `raynb start`.")
    spec = {
        "run_id": uuid.uuid4().hex, "name": run_config.name, "name_prefix": name_prefix,
        "num_workers": scaling_config.num_workers, "use_gpu": scaling_config.use_gpu,
        "timeout_s": scaling_config.timeout_s, "storage_path": _absolute(run_config.storage_path),
        "params": _json_safe(config if config is not None else {}),
        "cwd": os.getcwd(), "sys_path": [p for p in sys.path if p and os.path.isdir(p)],
    }
    cc, fc = run_config.checkpoint_config, run_config.failure_config
    if cc is not None:
        spec["checkpoint_config"] = {"num_to_keep": cc.num_to_keep,
                                     "checkpoint_score_attribute": cc.checkpoint_score_attribute,
                                     "checkpoint_score_order": cc.checkpoint_score_order}
    if fc is not None:
        spec["max_failures"] = fc.max_failures
    spec.update(extra or {})
    return spec, payload


def execute_run(fn, config=None, scaling_config: ScalingConfig | None = None,
                run_config: RunConfig | None = None, *, sources: dict | None = None,
                captured: dict | None = None, epochs: int | None = None, all_ranks: bool = False,
                name_prefix: str = "TorchTrainer", extra: dict | None = None):
    """Run ``fn`` on ``scaling_config.num_workers`` warm ranks and wait for it.

    Returns:
        (Result, rank 0's return value).

    Raises:
        RunError: a rank raised or died (the error carries the ``Result``).
        UnpicklableError: something ``fn`` reads cannot be shipped; nothing was sent.
        KeyboardInterrupt: the run was interrupted; every rank was cancelled first.
    """
    scaling_config = scaling_config or ScalingConfig()
    run_config = run_config or RunConfig()
    spec, payload = build_submission(fn, config, scaling_config, run_config, sources=sources,
                                     captured=captured, name_prefix=name_prefix, extra=extra)
    run_id = spec["run_id"]
    client = get_client()
    try:
        accepted = client.request(P.SUBMIT_RUN, spec, reply_types=(P.RUN_ACCEPTED,), buffers=[payload])
    except KeyboardInterrupt:
        # Interrupted before the head's answer: the run may exist already; cancel it by id.
        client.send(P.CANCEL_RUN, {"run_id": run_id})
        raise
    except ClusterError:
        disconnect()  # the head is gone: the next run attaches afresh, as connect() does
        raise
    if accepted.msg_type == P.ERROR:
        raise ValueError(accepted.content.get("message", "the head refused the run"))
    name = accepted.content["name"]
    display = _make_display(name, scaling_config.num_workers, _total_epochs(config, epochs),
                            run_config.verbose)
    return follow_run(client, run_id, display, all_ranks=all_ranks)


def follow_run(client, run_id: str, display, all_ranks: bool = False, reports: list | None = None,
               cancel_on_interrupt: bool = True):
    """Relay a submitted or attached run's events to ``display`` until it ends.

    Returns (Result, rank 0's return value); raises as ``execute_run``. With
    ``cancel_on_interrupt=False`` (an attached run) an interrupt only detaches."""
    reports = reports if reports is not None else []
    try:
        done = _follow(client, run_id, display, reports, all_ranks, cancel_on_interrupt)
    except ClusterError:
        display.finish()  # leave the pane's last state, not a frozen live widget
        disconnect()
        raise
    return _build_result(done, reports, display)


def _follow(client, run_id, display, reports, all_ranks, cancel_on_interrupt=True) -> P.Message:
    """Relay the run's events until it ends; an interrupt cancels it on every rank."""
    cancel_sent_at = None
    relay = _OutputRelay(all_ranks)
    last_heard = time.monotonic()
    while True:
        try:
            timeout = PING_EVERY_S if cancel_sent_at is None else max(
                0.0, min(PING_EVERY_S, CANCEL_WAIT_S - (time.monotonic() - cancel_sent_at)))
            msg = client.recv(timeout)
            now = time.monotonic()
            if msg is None:
                if cancel_sent_at is not None and now - cancel_sent_at >= CANCEL_WAIT_S:
                    raise ClusterError(f"the head did not confirm the cancel within {CANCEL_WAIT_S:.0f}s; "
                                       "check `raynb status`")
                if now - last_heard >= HEAD_SILENCE_S:
                    raise ClusterError(
                        f"lost contact with the raynb head at {client.address}: no answer for "
                        f"{now - last_heard:.0f}s while this run was active (was the cluster killed "
                        "or its machine lost?); check `raynb status`")
                client.send(P.PING)
                continue
            last_heard = now
            if msg.content.get("run_id") != run_id:
                continue
            if msg.msg_type == P.RUN_DONE:
                relay.end()
                if cancel_sent_at is not None:
                    display.handle({"kind": "state", "state": msg.content["state"], "time": time.time()})
                    display.finish()
                    raise KeyboardInterrupt(f"run {msg.content['name']!r} cancelled on every rank")
                return msg
            if msg.msg_type == P.RUN_EVENT:
                event = msg.content["event"]
                if event.get("kind") == "output":
                    relay.write(event)
                elif event.get("kind") == "report" and event.get("rank") == 0:
                    reports.append(event["metrics"])
                display.handle(event)
        except KeyboardInterrupt:
            if cancel_sent_at is not None or not cancel_on_interrupt:
                raise
            client.send(P.CANCEL_RUN, {"run_id": run_id})
            cancel_sent_at = time.monotonic()


def _build_result(done: P.Message, reports: list, display):
    from .rundir import read_reports
    from .train.config import result_from_record

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
    result = result_from_record(c, reports)
    display.finish()
    ret = None
    if c["state"] == "FINISHED" and done.buffers:
        ret = cloudpickle.loads(P.buffer_bytes(done.buffers[0]))
    if c["state"] != "FINISHED":
        raise result.error
    return result, ret
