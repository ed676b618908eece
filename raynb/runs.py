"""Runs outlive the notebook: list them, read one back, or follow one again.

The head keeps every run's record (and reads finished ones back from their
directories when it restarts), so a new kernel, or another process, sees the
runs an earlier one started: ``runs()``, ``get_run(name)``, ``attach(name)``.
"""
from __future__ import annotations

import datetime as _dt
import time

from . import protocol as P
from .client import get_client
from .train.config import Result, result_from_record

# Automatic fields left out of runs()'s metric columns (they are in metrics_dataframe).
_AUTO_FIELDS = ("timestamp", "time_this_iter_s")


def runs():
    """Every run the cluster knows, oldest first (``raynb.runs()``).

    Returns:
        pandas.DataFrame with one row per run: ``name``, ``state``, ``start_time``
        (datetime), ``duration_s`` (s; up to now for a live run), ``world_size``,
        ``restarts``, ``checkpoints``, ``path``, then the run's last reported metrics.

    Raises:
        ClusterError: no cluster can be reached or started.
    """
    import pandas as pd

    client = get_client()
    reply = client.request(P.LIST_RUNS, {}, reply_types=(P.RUNS_REPLY,))
    rows = []
    now = time.time()
    for r in reply.content.get("runs", []):
        start = r.get("started") or r.get("submitted")
        # Up to now for every run not ended yet: also FAILING / CANCELLING (had no duration).
        end = r.get("ended") or (now if r.get("state") not in ("FINISHED", "FAILED", "CANCELLED") else None)
        row = {"name": r["name"], "state": r["state"],
               "start_time": _dt.datetime.fromtimestamp(start) if start else None,
               "duration_s": (end - start) if start and end else None,
               "world_size": r.get("world_size"), "restarts": r.get("attempt", 0),
               "checkpoints": len(r.get("checkpoints") or []), "path": r.get("path")}
        for k, v in (r.get("metrics") or {}).items():
            if k not in _AUTO_FIELDS and k not in row:
                row[k] = v
        rows.append(row)
    columns = ["name", "state", "start_time", "duration_s", "world_size", "restarts", "checkpoints", "path"]
    return pd.DataFrame(rows, columns=None if rows else columns)


def _record(msg_type: str, name: str) -> dict:
    if not isinstance(name, str) or not name:
        raise TypeError(f"give a run's name (a str), got {name!r}; raynb.runs() lists them")
    reply = get_client().request(msg_type, {"name": name}, reply_types=(P.RUN_RECORD,))
    if reply.msg_type == P.ERROR:
        raise KeyError(reply.content.get("message", f"no run named {name!r}"))
    return reply.content["record"]


def get_run(name: str) -> Result:
    """A run's :class:`Result` by name, live or finished (``metrics_dataframe``,
    ``checkpoint``, ``best_checkpoints``, ``error``, ``logs``, ``state``).

    Raises:
        KeyError: the cluster knows no run of that name (the message lists recent ones).
        ClusterError: no cluster can be reached or started.
    """
    return result_from_record(_record(P.GET_RUN, name))


def _latest_live_run() -> str:
    reply = get_client().request(P.LIST_RUNS, {}, reply_types=(P.RUNS_REPLY,))
    live = [r for r in reply.content.get("runs", []) if r.get("state") not in ("FINISHED", "FAILED", "CANCELLED")]
    if not live:
        raise KeyError("no run is active on this cluster to attach to; raynb.runs() lists the finished "
                       "ones (raynb.get_run(name) reads one)")
    return max(live, key=lambda r: r.get("submitted") or 0)["name"]


def attach(name: str | None = None, verbose: int = 1, all_ranks: bool = False) -> Result:
    """Follow a run from this process until it ends, with the live progress pane
    (``%ray_attach NAME``): reconnect to a run after a kernel restart, or from a
    second notebook. Interrupting the cell detaches (the run goes on).

    Args:
        name (str | None): the run's name; None attaches to the newest active run.
        verbose (int): 0 shows no progress pane.
        all_ranks (bool): show every rank's output, not only rank 0's.

    Returns:
        The run's :class:`Result` (its ``error`` set when it failed; nothing is raised
        for a failed run, as it was not started here).

    Raises:
        KeyError: no run of that name.
    """
    from .display import NullProgress, progress_display
    from .errors import RunError
    from .progress import RunProgress
    from .runner import follow_run

    if name is None:
        name = _latest_live_run()
    record = _record(P.ATTACH_RUN, name)
    if record["state"] in ("FINISHED", "FAILED", "CANCELLED"):
        return result_from_record(record)
    progress = RunProgress(record["name"], record.get("world_size") or 1)
    t0 = record.get("started") or record.get("submitted")
    if record.get("started"):
        progress.on_event({"kind": "state", "state": "RUNNING", "time": t0})
    for row in record.get("reports", []):
        progress.on_event({"kind": "report", "rank": 0, "metrics": row, "time": row.get("timestamp")})
    for f in record.get("failures", []):
        progress.on_event({"kind": "note", "text": f"restart after: {f.get('message', f)}"})
    display = progress_display(progress) if verbose else NullProgress(progress)
    display.display()
    client = get_client()
    try:
        result, _ = follow_run(client, record["run_id"], display, all_ranks=all_ranks,
                               reports=list(record.get("reports", [])), cancel_on_interrupt=False)
    except RunError as e:
        return e.result
    except KeyboardInterrupt:
        display.finish()
        print(f"detached from run {name!r}; it goes on (raynb.attach({name!r}) to follow it again)")
        raise
    return result
