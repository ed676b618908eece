"""A run's record for ``get_run`` / ``attach_run`` (and the dashboard), read off the loop.

The record is ``run.json`` and ``params.json`` (small), the newest reports and the last
lines of output. Files are read on an ``offloop`` thread, from their ends
(``record_tail``), at most what the caller shows: ``max_reports`` and
``max_output_lines`` in the request (the dashboard asks for its plot's 2,000 reports and
no output), else ``RECORD_MAX_REPORTS`` and ``rundir.OUTPUT_TAIL_LINES``. A live run's
reports come from the rows its directory keeps in memory when the reply is sent, so a
follower (``attach_run``) misses none between the read and its first event (an ended
run's come from ``result.json``).

Optional fields added to the record: ``reports_dropped`` (how many older reports were
not sent; at least 1 when the file holds more than was read).
"""

from __future__ import annotations

from .. import settings
from ..protocol import messages
from ..storage.record_tail import tail_output, tail_reports
from ..storage.rundir import OUTPUT_TAIL_LINES, CorruptRunDirectory, read_run_dir
from .offloop import Busy
from .run import TERMINAL, Run

# Reports a record carries when the caller does not say (``RAYNB_RECORD_MAX_REPORTS``, as many
# as the dashboard's plot shows);
# ``raynb.get_run`` reads the rest from the run directory when it can (``client.runs``).
RECORD_MAX_REPORTS = settings.get("RAYNB_RECORD_MAX_REPORTS")


def limits(content: dict) -> tuple[int, int]:
    """(reports, output lines) a request asks for, defaults where it does not say."""
    reports = content.get("max_reports")
    lines = content.get("max_output_lines")
    return (RECORD_MAX_REPORTS if reports is None else reports, OUTPUT_TAIL_LINES if lines is None else lines)


def read_record(path, max_reports: int, max_output_lines: int) -> dict:
    """(a worker thread) The run directory's record, its reports and output bounded."""
    try:
        rec = read_run_dir(path, with_reports=False)
    except (OSError, CorruptRunDirectory) as e:
        return {"reports": [], "output": [], "read_error": str(e)}
    rec["reports"], rec["reports_more"] = tail_reports(path, max_reports) if max_reports else ([], False)
    rec["output"] = tail_output(path, max_output_lines) if max_output_lines else []
    return rec


class RunRecords:
    """A mixin of :class:`~raynb.cluster.head.server.Head`: ``get_run`` and ``attach_run``
    (its ``store``, ``registry``, ``offloop``, ``send``)."""

    def on_get_run(self, msg: messages.Message) -> None:
        self._send_record(msg, attach=False)

    def on_attach_run(self, msg: messages.Message) -> None:
        self._send_record(msg, attach=True)

    def _send_record(self, msg: messages.Message, attach: bool) -> None:
        run = self.store.find(msg.content.get("name"), msg.content.get("run_id"))
        if run is None:
            return self.send(
                msg.identity, messages.ERROR, {"message": self.store.no_such_run(msg.content.get("name"))}
            )
        max_reports, max_lines = limits(msg.content)
        self.store.before_record(run)
        path = run.rundir.path
        try:
            self.offloop.submit(
                lambda: read_record(path, max_reports, max_lines),
                lambda rec, error: self._record_read(msg.identity, run, attach, max_reports, rec, error),
            )
        except Busy as e:
            self.send(msg.identity, messages.ERROR, {"message": str(e)})

    def _record_read(self, identity: bytes, run: Run, attach: bool, max_reports: int, rec, error) -> None:
        """(the loop) The read is done: the record as of now, sent."""
        if error is not None:
            rec = {"reports": [], "output": [], "read_error": f"{type(error).__name__}: {error}"}
        more = rec.pop("reports_more", False)
        if run.state not in TERMINAL and run.rundir.rows:
            rows = run.rundir.rows
            rec["reports"], more = (list(rows[-max_reports:]) if max_reports else []), len(rows) > max_reports
        rec.update(run.summary())
        rec["reports_dropped"] = max(0, (run.reports or 0) - len(rec["reports"]), 1 if more else 0)
        for c in rec.get("checkpoints", []):
            c["path"] = run.checkpoint_path(c["name"])
        if attach:
            if run.state not in TERMINAL:
                run.followers.add(identity)
            workers = self.registry.workers
            rec["ranks"] = [
                {"rank": r, "worker_id": wid, "pid": workers[wid].pid, "hostname": workers[wid].hostname}
                for r, wid in enumerate(run.ranks)
                if wid in workers
            ]
        self.send(identity, messages.RUN_RECORD, {"record": rec})
