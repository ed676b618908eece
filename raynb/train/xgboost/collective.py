"""xgboost's collective across a run's ranks: the tracker, and each rank's communicator.

``xgboost.train`` inside :func:`communicator` trains one model over every rank of the
run (``xgboost.collective``, the Rabit protocol: the histogram allreduce of
``tree_method="hist"``). It follows what Ray Train's ``XGBoostConfig`` backend does
around a training function:

- rank 0 starts ``xgboost.tracker.RabitTracker`` in its own process, listening on the
  node's IP (``RAYNB_NODE_IP``: loopback on a local cluster), never on every interface;
- its address (``worker_args()``: host and port, JSON) reaches the other ranks over the
  run's torch.distributed group, which raynb formed before the function started, as
  plain bytes in a tensor: nothing received is unpickled;
- every rank enters ``xgboost.collective.CommunicatorContext`` with its raynb rank as
  ``dmlc_task_id`` (zero-padded, and the tracker sorts by task), so xgboost's rank is
  raynb's rank.

Known limit (xgboost 3.2): each rank's Rabit peer listener binds the wildcard address;
xgboost has no option for it. The tracker, which hands out the peers' addresses, is
bound to the node IP only.

A rank that dies makes its peers' next allreduce fail at once (``XGBoostError`` "Ring
Allreduce failed"), so the run fails and ``FailureConfig`` restarts it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os

from .. import session as _session

log = logging.getLogger("raynb.train.xgboost")

# How long the tracker waits for every rank to connect (and to say goodbye), seconds.
# A rank killed before it connected would otherwise keep rank 0's tracker thread forever.
BOOTSTRAP_TIMEOUT_S = 300


def _broadcast_json(obj, rank: int):
    """``obj`` (JSON-able, given on rank 0) on every rank, over the run's gloo group.

    Sent as UTF-8 bytes in a uint8 tensor (its length first): a peer's bytes are parsed
    as JSON, never unpickled (``broadcast_object_list`` would unpickle them).
    """
    import torch
    import torch.distributed as dist

    data = json.dumps(obj).encode() if rank == 0 else b""
    size = torch.tensor([len(data)], dtype=torch.int64)
    dist.broadcast(size, src=0)
    buf = (
        torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if rank == 0
        else torch.empty(int(size.item()), dtype=torch.uint8)
    )
    dist.broadcast(buf, src=0)
    return json.loads(bytes(buf.tolist()).decode()) if rank else obj


def _quiet_tracker_log() -> None:
    """Drop the tracker's "Task <id> got rank <r>" lines (one per rank and run, printed as
    ``LOG(CONSOLE)``, which no verbosity silences), passing every other xgboost message on
    to xgboost's own handler (warnings stay warnings). Once per process."""
    import ctypes

    import xgboost.core as core

    lib = core._LIB
    if getattr(lib, "_raynb_log_filter", None) is not None:
        return

    def log(msg: bytes) -> None:
        text = core.py_str(msg)
        if "Task " in text and " got rank " in text:
            return
        core._log_callback(msg)

    callback = ctypes.CFUNCTYPE(None, ctypes.c_char_p)(log)
    try:
        if lib.XGBRegisterLogCallback(callback) == 0:
            lib._raynb_log_filter = callback  # kept alive as long as the library
    except Exception:  # noqa: BLE001 - a private entry point: without it the lines just show
        pass


def node_ip() -> str:
    """The IP this worker's node registered with (the tracker listens there)."""
    return os.environ.get("RAYNB_NODE_IP") or "127.0.0.1"


@contextlib.contextmanager
def communicator(timeout_s: float | None = None):
    """Run the block inside xgboost's collective over all ranks of this run.

    Call it on every rank, inside a training function. With one rank it does nothing
    (``xgboost.train`` then trains alone, as a single process).

    Args:
        timeout_s (float | None): ``dmlc_timeout`` of the communicator, seconds (the run's
            ``ScalingConfig.timeout_s``; xgboost's default when None).

    Yields:
        dict: the communicator's arguments (empty with one rank).

    Raises:
        RuntimeError: called outside a training function.
        xgboost.core.XGBoostError: the group could not form, or a peer failed.
    """
    import xgboost.collective as coll

    task = _session._require("communicator")
    rank, world = task["rank"], task["world_size"]
    if world == 1:
        yield {}
        return
    tracker = None
    try:
        if rank == 0:
            from xgboost.tracker import RabitTracker

            _quiet_tracker_log()
            tracker = RabitTracker(
                n_workers=world, host_ip=node_ip(), port=0, sortby="task", timeout=BOOTSTRAP_TIMEOUT_S
            )
            tracker.start()
            args = tracker.worker_args()
        else:
            args = None
        args = dict(_broadcast_json(args, rank))
        args["dmlc_task_id"] = f"{rank:08d}"  # sortby="task": xgboost's rank is raynb's
        if timeout_s:
            args["dmlc_timeout"] = int(max(1, timeout_s))
        with coll.CommunicatorContext(**args):
            yield args
        if tracker is not None:
            tracker.wait_for(BOOTSTRAP_TIMEOUT_S)
    finally:
        if tracker is not None:
            try:
                tracker.free()
            except Exception as e:  # noqa: BLE001 - a failed run's tracker: its error is not ours
                log.info("xgboost tracker of a failed run: %s", str(e).splitlines()[0] if str(e) else e)
