"""The head's one handler table: every message type the head receives -> the handler that
acts on it, as an attribute path from the :class:`~raynb.cluster.head.server.Head`
(``protocol/dispatch.py``). ``Head.__init__`` binds it once; ``Head._receive`` dispatches
through it. The catalog (``protocol/catalog.py``) says which messages reach the head; a test
checks this table answers exactly those."""

from __future__ import annotations

from ..protocol import messages

HANDLERS: dict[str, str] = {
    # clients (client_requests.py, run_records.py, server.py)
    messages.HELLO: "on_hello",
    messages.PING: "on_ping",
    messages.STATUS_REQUEST: "on_status_request",
    messages.SHUTDOWN: "on_shutdown",
    messages.LIST_RUNS: "on_list_runs",
    messages.GET_RUN: "on_get_run",
    messages.ATTACH_RUN: "on_attach_run",
    messages.SUBMIT_RUN: "on_submit_run",
    messages.CANCEL_RUN: "on_cancel_run",
    messages.REQUEST_CHECKPOINT: "on_request_checkpoint",
    messages.RELEASE_DATA: "on_release_data",
    # a run's in-memory data, written by its client where it is placed (data_gate.py)
    messages.DATA_READY: "queue.gate.on_ready",
    messages.DATA_FAILED: "queue.gate.on_failed",
    # node agents and workers (node_events.py, server.py)
    messages.NODE_REGISTER: "on_node_register",
    messages.NODE_STATS: "on_node_stats",
    messages.WORKER_EXITED: "on_worker_exited",
    messages.NODE_LOST: "on_node_lost",
    messages.WORKER_READY: "on_worker_ready",
    messages.WORKER_ALIVE: "on_worker_alive",
    # a run's ranks (server.py)
    messages.TASK_EVENT: "on_task_event",
    messages.TASK_EVENTS: "on_task_events",
    messages.TASK_DONE: "on_task_done",
    # checkpoints streamed from nodes without the run's storage (transfers.py)
    messages.CHECKPOINT_FILE: "transfers.on_file",
    messages.CHECKPOINT_DONE: "transfers.on_done",
    messages.CHECKPOINT_FETCH: "transfers.on_fetch",
    # jobs: `raynb submit` (jobs.py)
    messages.SUBMIT_JOB: "jobs.on_submit_job",
    messages.LIST_JOBS: "jobs.on_list_jobs",
    messages.JOB_LOGS: "jobs.on_job_logs",
    messages.STOP_JOB: "jobs.on_stop_job",
}
