"""Following a run again after the client was cut off (a laptop that slept, a network
that changed): a fresh socket, attached to the run by id.

While a run is followed, a client of a remote head that hears nothing for
``run.HEAD_SILENCE_S`` (10 s) opens a fresh socket (a new routing id: the head's ROUTER
would ignore a second connection under the old one while it still holds that one) and
sends ``attach_run``; the head adds it to the run's followers and answers with the run's
record, whose reports replace what this client had. It keeps trying for up to
``CLIENT_RECONNECT_S`` (``$RAYNB_CLIENT_RECONNECT_S``, 600 s) of silence before it gives up.
A run that ended meanwhile is answered by its record, turned into its ``run_done``
(without rank 0's return value, which only the lost ``run_done`` carried).
"""

from __future__ import annotations

from ..cluster import settings
from ..cluster.protocol import messages
from ..cluster.protocol.run_states import RUN_TERMINAL as TERMINAL


def reconnect_s() -> float:
    return settings.get("RAYNB_CLIENT_RECONNECT_S")  # NaN or negative: the default, not 0


def reattach(client, run_id: str) -> None:
    """A fresh socket for ``client``, and an ``attach_run`` for ``run_id`` on it."""
    client.reconnect()
    client.send(messages.ATTACH_RUN, {"run_id": run_id})


def on_record(msg: messages.Message, reports: list) -> messages.Message | None:
    """The head's record of the re-attached run: its reports replace ``reports``; for a
    run that ended, the ``run_done`` it stands for, else None."""
    rec = msg.content.get("record") or {}
    fresh = list(rec.get("reports") or [])
    if fresh and rec.get("reports_dropped"):
        # The head sends a long run's newest reports only: the older ones this client had stay.
        first = fresh[0].get("training_iteration")
        older = [
            r
            for r in reports
            if isinstance(first, int)
            and isinstance(r.get("training_iteration"), int)
            and r["training_iteration"] < first
        ]
        fresh = older + fresh
    reports[:] = fresh or reports
    if rec.get("state") not in TERMINAL:
        return None
    done = {
        "run_id": rec.get("run_id"),
        "name": rec.get("name"),
        "state": rec.get("state"),
        "errors": rec.get("errors") or [],
        "path": rec.get("path"),
        "metrics": rec.get("metrics"),
        "num_reports": len(reports),
        "checkpoint": (rec.get("checkpoints") or [{}])[-1].get("path"),
        "checkpoints": rec.get("checkpoints") or [],
        "failures": rec.get("failures") or [],
        "num_failures": rec.get("num_failures", 0),
        "attempt": rec.get("attempt", 0),
        "started": rec.get("started"),
        "ended": rec.get("ended"),
        "time_total_s": rec.get("time_total_s"),
    }
    return messages.Message(messages.RUN_DONE, done)
