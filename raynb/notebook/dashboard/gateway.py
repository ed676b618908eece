"""The dashboard's side of the cluster: one connection, used from one thread.

Tornado serves the dashboard from its event loop, and a raynb request blocks (a
ZeroMQ round trip, a file read): every query here runs on one worker thread of the
gateway's own (``await gateway.call(gateway.status)``), which owns the only socket.
The cluster is the local one of this Jupyter server's ``RAYNB_HOME`` (its connection
file); the dashboard never starts one. A connection is reused while that file names
the same cluster, and dropped after any failed request, so a late reply to a timed-out
request is never taken for the answer to the next one.
"""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor

from ...cluster.connection_file import connection_file_path, read_connection_file
from ...cluster.protocol import messages
from ...cluster.protocol.control import Client
from ...cluster.storage.run_logs import OUTPUT_FILE, check_selection, tail_output
from ...errors import ClusterError
from .trial_status import TrialStatuses

TERMINAL = ("FINISHED", "FAILED", "CANCELLED", "STOPPED")
# Reports of one run sent to the page (the newest); its plot needs no more.
MAX_REPORTS = 2000
MAX_LOG_LINES = 2000


class NoCluster(Exception):
    """No cluster to ask, or it does not answer (HTTP 503)."""


class NoSuchRun(KeyError):
    """The cluster knows no run of that name (HTTP 404). ``names``: the runs it has."""

    def __init__(self, name: str, names: list[str]):
        super().__init__(name)
        self.message = f"no run named {name!r} on this cluster"
        self.names = names


class RunEnded(Exception):
    """A cancel for a run that already ended (HTTP 409)."""


def json_safe(value):
    """``value`` with NaN and infinities as None (JSON has neither), containers copied."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return repr(value)


class ClusterGateway:
    """Args: timeout (float): seconds to wait for the head's reply to one request."""

    def __init__(self, timeout: float = 5.0):
        self.timeout = timeout
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raynb-dashboard")
        self._client: Client | None = None
        self._token = None
        self._trials = TrialStatuses()

    async def call(self, fn, *args):
        """``fn(*args)`` on the gateway's thread (fn: one of the query methods below)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def close(self) -> None:
        self._executor.submit(self._drop).result(timeout=10)
        self._executor.shutdown(wait=True)

    # -- the connection (gateway thread only) ------------------------------------------
    def _connection(self) -> Client:
        info = read_connection_file()
        if info is None:
            self._drop()
            raise NoCluster(
                f"no raynb cluster is running ({connection_file_path()} is missing): start "
                "one with `raynb start`, `%ray_cluster start` or a first %%ray_train cell"
            )
        if (
            self._client is None
            or info.get("token") != self._token
            or info["address"] != self._client.address
        ):
            self._drop()
            self._client = Client(info["address"], info["key"].encode(), info)
            self._token = info.get("token")
        return self._client

    def _drop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _request(self, msg_type: str, content: dict, reply: str) -> messages.Message:
        client = self._connection()
        try:
            return client.request(msg_type, content, reply_types=(reply,), timeout=self.timeout)
        except ClusterError as e:
            self._drop()
            raise NoCluster(str(e)) from None

    # -- queries (gateway thread only) ---------------------------------------------------
    def status(self) -> dict:
        """The head's status: ``nodes``, ``workers``, ``runs`` and the head's own fields."""
        return json_safe(self._request(messages.STATUS_REQUEST, {}, messages.STATUS_REPLY).content)

    def runs(self) -> list[dict]:
        """Every run's summary (``raynb.runs()``'s source), oldest first."""
        return json_safe(self._request(messages.LIST_RUNS, {}, messages.RUNS_REPLY).content.get("runs", []))

    def run_list(self) -> dict:
        """``{"runs": [summary, ...]}`` (the API's answer); a Tune trial's run also has
        ``trial_status`` (the notebook's) and ``experiment_path`` (see ``trial_status``)."""
        return {"runs": self._trials.annotate(self.runs())}

    def _summary(self, name: str) -> dict:
        runs = self.runs()
        matches = [r for r in runs if r.get("name") == name]
        if not matches:
            raise NoSuchRun(name, [r.get("name") for r in runs])
        # A name reused (a resumed run): the live or newest one, as the head picks.
        return max(matches, key=lambda r: (r.get("state") not in TERMINAL, r.get("submitted") or 0))

    def record(self, name: str) -> dict:
        """Run ``name``'s record: summary, params, failures, checkpoints and its newest
        ``MAX_REPORTS`` rank-0 reports (``reports``), without output (see :meth:`logs`)."""
        # What the page shows, no more: the head reads it from the files' ends, off its loop.
        msg = self._request(
            messages.GET_RUN,
            {"name": name, "max_reports": MAX_REPORTS, "max_output_lines": 0},
            messages.RUN_RECORD,
        )
        if msg.msg_type == messages.ERROR:
            if "no run named" not in msg.content.get("message", "no run named"):
                raise NoCluster(msg.content["message"])  # the head is busy: the page asks again
            raise NoSuchRun(name, [r.get("name") for r in self.runs()])
        rec = dict(msg.content["record"])
        rec.pop("output", None)
        reports = rec.get("reports") or []
        rec["reports"] = reports[-MAX_REPORTS:]
        rec["reports_dropped"] = max(0, len(reports) - MAX_REPORTS) + (rec.get("reports_dropped") or 0)
        return json_safe(rec)

    def logs(self, name: str, rank, stream, lines: int) -> dict:
        """The newest ``lines`` lines of run ``name``'s output: of ``rank`` (None: all
        ranks), of ``stream`` (None: both), read from its ``output.log``.

        Raises:
            NoSuchRun: no run of that name.
            ValueError: a rank the run does not have, a bad stream or line count.
        """
        run = self._summary(name)
        check_selection(rank, stream, run.get("world_size"))
        entries, more = tail_output(run["path"], rank, stream, min(lines, MAX_LOG_LINES))
        return {
            "name": run["name"],
            "rank": rank,
            "stream": stream,
            "world_size": run.get("world_size"),
            "state": run.get("state"),
            "more": more,
            "file": f"{run['path']}/{OUTPUT_FILE}",
            "lines": [{"rank": r, "stream": s, "text": t} for r, s, t in entries],
        }

    def cancel(self, name: str) -> dict:
        """Ask the head to cancel run ``name`` on every rank (it answers nothing).

        Raises:
            NoSuchRun: no run of that name.
            RunEnded: it already ended.
        """
        run = self._summary(name)
        if run.get("state") in TERMINAL:
            raise RunEnded(f"run {name!r} already ended ({run['state']}); there is nothing to cancel")
        try:
            self._connection().send(messages.CANCEL_RUN, {"run_id": run["run_id"]})
        except Exception as e:  # noqa: BLE001 - a closed or broken socket: report, reconnect next time
            self._drop()
            raise NoCluster(f"could not reach the raynb head to cancel {name!r}: {e}") from None
        return {"name": name, "run_id": run["run_id"], "state": "CANCELLING", "was": run.get("state")}
