"""Runs outlive the notebook: list them and fetch one's record by name.

The head keeps every run's record (and reads finished ones back from their
directories when it restarts), so a new kernel, or another process, sees the
runs an earlier one started: ``runs()`` here; ``raynb.get_run(name)`` and
``raynb.attach(name)`` (in ``raynb.train.fit_run``) build on :func:`fetch_record`.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time
from pathlib import Path

from ..cluster.protocol import messages
from ..cluster.protocol.run_states import RUN_TERMINAL as TERMINAL
from ..cluster.storage.rundir import read_reports
from .connection import connection_of_its_own, get_client

# Automatic fields left out of runs()'s metric columns (they are in metrics_dataframe).
_AUTO_FIELDS = ("timestamp", "time_this_iter_s")


def _row(r: dict, now: float) -> dict:
    """One run's row of runs(): its fields, then its last reported metrics."""
    start = r.get("started") or r.get("submitted")
    # Up to now for every run not ended yet: also FAILING / CANCELLING (had no duration).
    end = r.get("ended") or (now if r.get("state") not in TERMINAL else None)
    row = {
        "name": r["name"],
        "state": r["state"],
        "kind": r.get("kind"),
        "experiment": r.get("experiment"),
        "start_time": _dt.datetime.fromtimestamp(start) if start else None,
        "duration_s": (end - start) if start and end else None,
        "world_size": r.get("world_size"),
        "restarts": r.get("attempt", 0),
        "checkpoints": len(r.get("checkpoints") or []),
        "path": r.get("path"),
    }
    for k, v in (r.get("metrics") or {}).items():
        if k not in _AUTO_FIELDS and k not in row:
            row[k] = v
    return row


def runs(experiment: str | None = None, kind: str | None = None, trials: bool = True):
    """The runs the cluster knows, oldest first (``raynb.runs()``).

    A Tune experiment's trials are runs too (one each), listed with the experiment's
    name in the ``experiment`` column: ``runs(experiment="tune_digits")`` lists one
    experiment's trials, ``runs(trials=False)`` only the runs that are no trial.

    Args:
        experiment (str | None): only the trials of this Tune experiment (its directory's name).
        kind (str | None): only runs of this kind: ``"ray_train"`` (a ``%%ray_train``
            cell), ``"TorchTrainer"``, or a Tune trainable's name.
        trials (bool): False leaves out every Tune trial.

    Returns:
        pandas.DataFrame with one row per run: ``name``, ``state`` (``FINISHED``,
        ``FAILED``, ``CANCELLED``, ``STOPPED`` for a trial its scheduler stopped early,
        or a live state), ``kind``, ``experiment`` (None for a run that is no trial),
        ``start_time`` (datetime), ``duration_s`` (s; up to now for a live run),
        ``world_size``, ``restarts``, ``checkpoints``, ``path``, then the run's last
        reported metrics.

    Raises:
        ClusterError: no cluster can be reached or started.
    """
    import pandas as pd

    client = get_client()
    reply = client.request(messages.LIST_RUNS, {}, reply_types=(messages.RUNS_REPLY,))
    rows = []
    now = time.time()
    for r in reply.content.get("runs", []):
        if (
            (experiment is not None and r.get("experiment") != experiment)
            or (kind is not None and r.get("kind") != kind)
            or (not trials and r.get("experiment"))
        ):
            continue
        rows.append(_row(r, now))
    columns = [
        "name",
        "state",
        "kind",
        "experiment",
        "start_time",
        "duration_s",
        "world_size",
        "restarts",
        "checkpoints",
        "path",
    ]
    return pd.DataFrame(rows, columns=None if rows else columns)


def fetch_record(msg_type: str, name: str) -> dict:
    """The head's record of run ``name`` (``P.GET_RUN``, or ``P.ATTACH_RUN`` to also
    receive its events from now on).

    Raises:
        TypeError: ``name`` is not a non-empty str.
        KeyError: the cluster knows no run of that name (the message lists recent ones).
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"give a run's name (a str), got {name!r}; raynb.runs() lists them")
    if msg_type == messages.GET_RUN and threading.current_thread() is not threading.main_thread():
        # another thread (a notebook's watcher) while the main one may follow a run on the
        # process's connection: one socket serves one thread
        client = connection_of_its_own()
        try:
            reply = client.request(msg_type, {"name": name}, reply_types=(messages.RUN_RECORD,))
        finally:
            client.close()
    else:
        reply = get_client().request(msg_type, {"name": name}, reply_types=(messages.RUN_RECORD,))
    if reply.msg_type == messages.ERROR:
        raise KeyError(reply.content.get("message", f"no run named {name!r}"))
    record = reply.content["record"]
    if record.get("reports_dropped") and record.get("path"):
        # The head sends a long run's newest reports only; every row is in its result.json,
        # read here where this machine sees the run directory.
        try:
            rows = read_reports(Path(record["path"])) if Path(record["path"]).is_dir() else []
        except (OSError, ValueError):
            rows = []
        if len(rows) > len(record.get("reports") or []):
            record["reports"], record["reports_dropped"] = rows, 0
    return record


def latest_live_run() -> str:
    """The name of the newest active run. Raises KeyError when none is active."""
    reply = get_client().request(messages.LIST_RUNS, {}, reply_types=(messages.RUNS_REPLY,))
    live = [r for r in reply.content.get("runs", []) if r.get("state") not in TERMINAL]
    if not live:
        raise KeyError(
            "no run is active on this cluster to attach to; raynb.runs() lists the finished "
            "ones (raynb.get_run(name) reads one)"
        )
    return max(live, key=lambda r: r.get("submitted") or 0)["name"]
