"""The head's one handler table: every message type the head receives -> the handler that
acts on it, as an attribute path from the :class:`~raynb.cluster.head.server.Head`
(``protocol/dispatch.py``). ``Head.__init__`` binds it once; ``Head._receive`` dispatches
through it. The catalog (``protocol/catalog.py``) says which messages reach the head; a test
checks this table answers exactly those."""

from __future__ import annotations

from ..protocol import messages as P

HANDLERS: dict[str, str] = {
    # clients (client_requests.py, run_records.py, server.py)
    P.HELLO: "on_hello",
    P.PING: "on_ping",
    P.STATUS_REQUEST: "on_status_request",
    P.SHUTDOWN: "on_shutdown",
    P.LIST_RUNS: "on_list_runs",
    P.GET_RUN: "on_get_run",
    P.ATTACH_RUN: "on_attach_run",
    P.SUBMIT_RUN: "on_submit_run",
    P.CANCEL_RUN: "on_cancel_run",
    P.REQUEST_CHECKPOINT: "on_request_checkpoint",
    P.RELEASE_DATA: "on_release_data",
    # a run's in-memory data, written by its client where it is placed (data_gate.py)
    P.DATA_READY: "queue.gate.on_ready",
    P.DATA_FAILED: "queue.gate.on_failed",
    # node agents and workers (node_events.py, server.py)
    P.NODE_REGISTER: "on_node_register",
    P.NODE_STATS: "on_node_stats",
    P.WORKER_EXITED: "on_worker_exited",
    P.NODE_LOST: "on_node_lost",
    P.WORKER_READY: "on_worker_ready",
    P.WORKER_ALIVE: "on_worker_alive",
    # a run's ranks (server.py)
    P.TASK_EVENT: "on_task_event",
    P.TASK_EVENTS: "on_task_events",
    P.TASK_DONE: "on_task_done",
    # checkpoints streamed from nodes without the run's storage (transfers.py)
    P.CHECKPOINT_FILE: "transfers.on_file",
    P.CHECKPOINT_DONE: "transfers.on_done",
    P.CHECKPOINT_FETCH: "transfers.on_fetch",
    # jobs: `raynb submit` (jobs.py)
    P.SUBMIT_JOB: "jobs.on_submit_job",
    P.LIST_JOBS: "jobs.on_list_jobs",
    P.JOB_LOGS: "jobs.on_job_logs",
    P.STOP_JOB: "jobs.on_stop_job",
}
