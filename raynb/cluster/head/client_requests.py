"""The head's answers to what a client asks: hello, ping, the run list, one run's record
(and following it: ``attach_run``), the cluster's status.

A mixin of :class:`~raynb.cluster.head.server.Head` (its ``store``, ``registry``,
``send``, ``session``, ...), as ``node_events`` is for the node side.
"""

from __future__ import annotations

import os
import time

from ..protocol import messages
from ..storage.made_ahead import spare_files
from .local_node import LOCAL_NODE_ID


class ClientRequests:
    def on_hello(self, msg: messages.Message) -> None:
        if msg.content.get("keep") is True and not self._stop:  # `raynb start` found it running
            self.idle_stop.keep()
        self.send(
            msg.identity,
            messages.HELLO_REPLY,
            {
                "address": self.address,
                "pid": os.getpid(),
                "version": messages.PROTOCOL_VERSION,
                "kept": self.idle_stop.kept,
            },
        )

    def on_ping(self, msg: messages.Message) -> None:
        self.send(msg.identity, messages.PONG, {"time": time.time()})

    def on_list_runs(self, msg: messages.Message) -> None:
        self.send(msg.identity, messages.RUNS_REPLY, {"runs": self.store.summaries()})

    def on_status_request(self, msg: messages.Message) -> None:
        self.send(msg.identity, messages.STATUS_REPLY, self.status())

    def status(self) -> dict:
        return {
            "address": self.address,
            "pid": os.getpid(),
            "uptime_s": time.time() - self.started,
            "rejected_messages": self.session.rejected,
            "curve": self.gatekeeper is not None,
            "rejected_connections": self.gatekeeper.rejected if self.gatekeeper else 0,
            "duplicate_nodes_refused": getattr(self, "duplicate_nodes_refused", 0),
            "checkpoint_transfers": self.transfers.status(),
            "stop_when_idle": self.idle_stop.owners is not None,
            "kept": self.idle_stop.kept,
            "spare_files": spare_files.stats(),
            "local_node": self.local_node.status() if self.local_node is not None else None,
            "loop": {
                "stalls": self.loop_watch.stalls,
                "longest_stall_s": round(self.loop_watch.longest_s, 2),
                "offloop_pending": self.offloop.pending,
            },
            "nodes": self.registry.status_nodes(),
            "workers": self.registry.status_workers({r.run_id: r.name for r in self.runs.values()}),
            "runs": [
                {
                    "run_id": r.run_id,
                    "name": r.name,
                    "state": r.state,
                    "world_size": r.world_size,
                    "path": str(r.rundir.path),
                }
                for r in self.runs.values()
            ],
        }

    def on_cancel_run(self, msg: messages.Message) -> None:
        run = self.runs.get(msg.content.get("run_id"))
        if run is None:
            return
        if run.state == "PENDING":
            self.queue.discard(run)
        self.controller.cancel(run, stop=msg.content.get("reason") == "stop")

    def on_request_checkpoint(self, msg: messages.Message) -> None:
        """A driver Callback set SHOULD_CHECKPOINT for a trial: its running ranks are asked
        to checkpoint at their next step (a class Trainable's loop reads it)."""
        run = self.runs.get(msg.content["run_id"])
        if run is None or run.state != "RUNNING":
            return
        for wid in run.ranks:
            w = self.registry.workers.get(wid)
            if w is not None:
                self.send(
                    w.identity, messages.CHECKPOINT_REQUESTED, {"run_id": run.run_id, "attempt": run.attempt}
                )

    def with_cause(self, why: str | None) -> str | None:
        """Why a run cannot be placed (``why``: the scheduler's reason, or None): the local
        node agent that keeps exiting is the cause to name, where it is (not the empty
        node list it leaves); with no node at all nothing could ever run it."""
        gave_up = self.local_node.gave_up if self.local_node is not None else None
        if not gave_up or LOCAL_NODE_ID in self.registry.nodes:
            return why
        if why:
            return f"{gave_up} (so: {why})"
        return gave_up if not self.registry.nodes else None

    def fail_waiting_runs(self) -> None:
        """The local node agent is given up and no node is left: the runs waiting for room
        fail now, naming it, instead of waiting for good."""
        why = self.with_cause(None)
        for run in (
            [r for r in self.runs.values() if r.state == "PENDING" and r.run_id in self.queue] if why else ()
        ):
            self.queue.discard(run)
            self.controller.no_room(run, why)
