"""The messages of jobs (``raynb submit``, ``cluster/head/jobs.py``) and of launchers'
node events (``node_lost``, ``cluster/head/addons.py``): their names, directions and
schemas, which ``protocol`` imports into its ``MESSAGE_TYPES`` and ``SCHEMAS``."""
from __future__ import annotations

from .schema import Int, ListOf, MapOf, Record

# client -> head
NODE_LOST = "node_lost"          # {"node_id", "reason"}: a launcher saw the node die (Ray's node events)
SUBMIT_JOB = "submit_job"        # {"entrypoint": [argv], "env"?, "job_id"?}; buffers[0]? = working dir (.tar.gz)
LIST_JOBS = "list_jobs"          # {}
JOB_LOGS = "job_logs"            # {"job_id", "offset"}: the job's output from byte ``offset``
STOP_JOB = "stop_job"            # {"job_id"}
# head -> client
NODE_LOST_REPLY = "node_lost_reply"  # {"known": bool}
JOB_REPLY = "job_reply"          # {"job": {...}}: answer to submit_job / stop_job
JOBS_REPLY = "jobs_reply"        # {"jobs": [{...}, ...]}
JOB_LOGS_REPLY = "job_logs_reply"  # {"job_id", "text", "offset", "state"}

JOB_SCHEMAS: dict[str, Record] = {
    NODE_LOST: Record({"node_id": str, "reason": str}),
    NODE_LOST_REPLY: Record({"known": bool}),
    SUBMIT_JOB: Record({"entrypoint": ListOf(str), "env?": MapOf(str), "job_id?": (str, None)}),
    LIST_JOBS: Record(),
    JOB_LOGS: Record({"job_id": str, "offset": Int(0)}),
    STOP_JOB: Record({"job_id": str}),
    JOB_REPLY: Record({"job": dict}),
    JOBS_REPLY: Record({"jobs": ListOf(dict)}),
    JOB_LOGS_REPLY: Record({"job_id": str, "text": str, "offset": Int(0), "state": str}),
}
