"""The messages of bulk transfers, apart from the control messages: checkpoint files a
rank streams to the head and fetches back (``ckpt_transfer``, ``head/transfers.py``), and
the pieces of a shared-memory segment a client writes to a node agent's data socket
(``data_server``), and the head's ask for that data once ranks are placed (``data_needed``).
Their names, directions and schemas, which ``protocol`` imports into
its ``MESSAGE_TYPES`` and ``SCHEMAS``."""
from __future__ import annotations

from .schema import Int, ListOf, MapOf, Record

_RANK = Int(0, 1 << 20)

# a rank on a node without the run's storage -> head (``ckpt_transfer``)
CHECKPOINT_FILE = "checkpoint_file"    # {"run_id", "rank", "attempt", "report", "worker_id", "transfer",
                                       #  "path", "offset"}; buffers[0] = a piece of the file
CHECKPOINT_DONE = "checkpoint_done"    # {..., "files": {path: sha256}}: commit the rank's directory
CHECKPOINT_FETCH = "checkpoint_fetch"  # {"run_id", "rank", "attempt", "worker_id", "checkpoint",
                                       #  "path"?, "offset"?}: the file list, or one piece;
                                       # a client (routing id "client:...") sends only
                                       # {"run_id", "checkpoint", "path"?, "offset"?}
# head -> that rank
CHECKPOINT_ACK = "checkpoint_ack"      # {"path"}: the staged directory, for the report
CHECKPOINT_PIECE = "checkpoint_piece"  # {"files": {path: [size, sha256]}}; buffers[0] = a piece
# client -> a node agent's data socket (cluster.data_server), and its answer
DATA_PUT = "data_put"            # {"name", "offset", "nbytes", "done"?}; buffers[0] = a piece of a segment
DATA_ACK = "data_ack"            # {"name", "offset", "error"?}
# head -> the run's client, once an attempt is placed: write the run's shared-memory data
# to these nodes of the placement (``client.bulk``); the ranks start on its answer.
DATA_NEEDED = "data_needed"      # {"run_id", "attempt", "key", "nodes": [{"node_id", "pid", "ip",
                                 #  "data_port"?, "data_key"?, "shm_id"?, "blocks": [block id]}]}
DATA_READY = "data_ready"        # client -> head {"run_id", "attempt"}: every segment asked for is written
DATA_FAILED = "data_failed"      # client -> head {"run_id", "attempt", "message"}: it could not be (why)

_NEEDS = Record({"node_id": str, "pid": Int(1), "ip": str, "hostname?": (str, None), "data_port?": (Int(1, 65535), None),
                  "data_key?": (str, None), "shm_id?": (str, None), "blocks": ListOf(str)})
TRANSFER_SCHEMAS: dict[str, Record] = {
    DATA_NEEDED: Record({"run_id": str, "attempt": _RANK, "key": str, "nodes": ListOf(_NEEDS)}),
    DATA_READY: Record({"run_id": str, "attempt": _RANK}),
    DATA_FAILED: Record({"run_id": str, "attempt": _RANK, "message": str}),
    DATA_PUT: Record({"name": str, "offset": Int(0), "nbytes": Int(1), "done?": bool}),
    DATA_ACK: Record({"name": str, "offset": Int(0), "error?": str}),
    CHECKPOINT_FILE: Record({"run_id": str, "rank": _RANK, "attempt?": _RANK, "report": _RANK, "worker_id": str,
                             "transfer": str, "path": str, "offset": Int(0)}),
    CHECKPOINT_DONE: Record({"run_id": str, "rank": _RANK, "attempt?": _RANK, "report": _RANK, "worker_id": str,
                             "transfer": str, "files": MapOf(str)}),
    CHECKPOINT_FETCH: Record({"run_id": str, "rank?": _RANK, "attempt?": _RANK, "worker_id?": str,
                              "checkpoint": str, "path?": str, "offset?": Int(0)}),
    CHECKPOINT_ACK: Record({"path": str}),
}
