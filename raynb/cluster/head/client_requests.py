"""The head's answers to what a client asks: hello, ping, the run list, one run's record
(and following it: ``attach_run``), the cluster's status.

A mixin of :class:`~raynb.cluster.head.server.Head` (its ``store``, ``registry``,
``send``, ``session``, ...), as ``node_events`` is for the node side.
"""
from __future__ import annotations

import os
import time

from .. import protocol as P, spare_files
from .run import TERMINAL


class ClientRequests:
    def on_hello(self, msg: P.Message) -> None:
        if msg.content.get("keep") is True and not self._stop:   # `raynb start` found it running
            self.idle_stop.keep()
        self.send(msg.identity, P.HELLO_REPLY, {"address": self.address, "pid": os.getpid(),
                                                "version": P.PROTOCOL_VERSION, "kept": self.idle_stop.kept})

    def on_ping(self, msg: P.Message) -> None:
        self.send(msg.identity, P.PONG, {"time": time.time()})

    def on_list_runs(self, msg: P.Message) -> None:
        self.send(msg.identity, P.RUNS_REPLY, {"runs": self.store.summaries()})

    def on_get_run(self, msg: P.Message) -> None:
        run = self.store.find(msg.content.get("name"), msg.content.get("run_id"))
        if run is None:
            return self.send(msg.identity, P.ERROR, {"message": self.store.no_such_run(msg.content.get("name"))})
        self.send(msg.identity, P.RUN_RECORD, {"record": self.store.record(run)})

    def on_attach_run(self, msg: P.Message) -> None:
        run = self.store.find(msg.content.get("name"), msg.content.get("run_id"))
        if run is None:
            return self.send(msg.identity, P.ERROR, {"message": self.store.no_such_run(msg.content.get("name"))})
        if run.state not in TERMINAL:
            run.followers.add(msg.identity)
        rec = self.store.record(run)
        workers = self.registry.workers
        rec["ranks"] = [{"rank": r, "worker_id": wid, "pid": workers[wid].pid,
                         "hostname": workers[wid].hostname}
                        for r, wid in enumerate(run.ranks) if wid in workers]
        self.send(msg.identity, P.RUN_RECORD, {"record": rec})

    def on_status_request(self, msg: P.Message) -> None:
        self.send(msg.identity, P.STATUS_REPLY, self.status())

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
            "stop_when_idle": self.idle_stop.owners is not None, "kept": self.idle_stop.kept,
            "spare_files": spare_files.stats(),
            "nodes": self.registry.status_nodes(),
            "workers": self.registry.status_workers({r.run_id: r.name for r in self.runs.values()}),
            "runs": [{"run_id": r.run_id, "name": r.name, "state": r.state, "world_size": r.world_size,
                      "path": str(r.rundir.path)} for r in self.runs.values()],
        }

