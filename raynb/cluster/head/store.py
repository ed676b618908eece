"""The head's run store: every run it knows, and their files on disk.

A run directory holds ``run.json`` (the record), ``params.json``, ``result.json`` /
``progress.csv`` (rank 0's reports), ``output.log``, ``function.pkl`` (not for a Tune
trial: ``Tuner.restore`` takes the trainable again) and the
committed ``checkpoint_000NNN/`` (``rundir``, ``checkpoints``). The store creates a
run's directory when it is submitted, appends its reports and output, commits its
checkpoints once every rank has reported past them, and, when a head starts, reads
the run directories of known storage paths back, so a restarted head lists them.

A run whose files cannot be written (a full disk: ENOSPC) fails, with a message
naming the file and the error; the head and the other runs go on.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Callable

from ..connection_file import raynb_home
from ..storage.checkpoints import CheckpointStore
from ..storage.made_ahead.linked_files import LinkedFiles
from ..storage.resume_files import read_for_resume
from ..storage.rundir import (
    CorruptRunDirectory,
    RunDirectory,
    RunFileError,
    default_storage_path,
    make_run_name,
    read_run_dir,
    write_json_atomic,
)
from .controller import AUTO_FIELDS
from .run import TERMINAL, Run
from .uploads import Uploads

log = logging.getLogger("raynb.head")

# Finished runs read back from disk when the head starts (newest first).
ARCHIVE_LIMIT = 1000
# A new run's run.json is first written this long after it was created (s, at a tick), or
# sooner when something needs it (a record asked for, a staged checkpoint), or at its end.
# A warm re-run of a short function ends before: its run.json is written once, as a new
# file, instead of twice (the second replacing the first, which costs ext4 a forced block
# allocation). A head killed within this time of a run's
# creation leaves that run's directory without run.json: a restarted head does not list it.
STATE_DELAY_S = 0.2
HEAD_DIED = "the raynb head stopped while this run was active"


class RunRefused(ValueError):
    """A submitted run cannot be created (the message says why and what to do)."""


class RunStore:
    """Args:
    emit: ``emit(run, event)`` sends an event to the run's clients (checkpoint
        commits and notes about them).
    write_failed: ``write_failed(run)`` once a file of the run could not be written
        (``run.write_error`` says which and why); the run must fail.
    """

    def __init__(
        self, emit: Callable[[Run, dict], None], write_failed: Callable[[Run], None] = lambda run: None
    ):
        self.emit = emit
        self.write_failed = write_failed
        self.runs: dict[str, Run] = {}
        # The runs created by this head that the tick still looks at (``ticking``): the
        # finished ones (up to 1000 kept in ``runs``) are not walked at every tick.
        self._ticking: dict[str, Run] = {}
        self._storage_paths: set[str] = set()
        self._state_due: dict[str, float] = {}  # run_id -> when its first run.json is written
        self.links = LinkedFiles()  # a re-run's function.pkl / params.json: hard links when unchanged
        self._after_start: list[tuple[Run, Callable[[], object]]] = []  # see write_after_start
        self.uploads = Uploads()  # checkpoints copied to a storage URI, in a thread of its own

    # -- finding runs -----------------------------------------------------------
    def find(self, name: str | None, run_id: str | None = None) -> Run | None:
        if run_id and run_id in self.runs:
            return self.runs[run_id]
        matches = [r for r in self.runs.values() if r.name == name]
        # A name reused (a resumed run): the live or newest one.
        return max(matches, key=lambda r: (r.state not in TERMINAL, r.submitted), default=None)

    def no_such_run(self, name) -> str:
        names = [r.name for r in sorted(self.runs.values(), key=lambda r: r.submitted)][-5:]
        return f"no run named {name!r} on this cluster; raynb.runs() lists them" + (
            f" (latest: {', '.join(names)})" if names else ""
        )

    def summaries(self) -> list[dict]:
        return [r.summary() for r in sorted(self.runs.values(), key=lambda r: r.submitted)]

    def before_record(self, run: Run) -> None:
        """(the loop) What a record read from disk must see: the run's first run.json and its
        rows waiting; the read itself is ``run_records``' (off the loop)."""
        if run.run_id in self._state_due:
            self.write_state(run)
        self.flush(run)

    def ticking(self) -> list[Run]:
        """The runs the head's tick looks at: those not ended, and an ended one whose
        ranks' progress is still to be sent (``progress_relay``). An ended run leaves the
        list for good (it never becomes live again: a resumed run is a new ``Run``)."""
        for run_id, run in list(self._ticking.items()):
            if run.state in TERMINAL and not run.pending_progress:
                del self._ticking[run_id]
        return list(self._ticking.values())

    def live_count(self) -> int:
        """How many runs are submitted and not ended."""
        return sum(1 for r in self._ticking.values() if r.state not in TERMINAL)

    def prune(self, keep: int = 1000) -> None:
        if len(self.runs) <= keep:
            return  # fewer runs than kept: nothing to prune (no walk over them per run)
        live = self.live_count()
        excess = len(self.runs) - live - keep  # ended runs beyond ``keep``: the oldest go
        # From the oldest on (dicts keep insertion order), so a finish past the limit costs
        # one step, not a walk over the 1000 kept.
        for run_id, r in list(itertools.islice(self.runs.items(), excess + live)):
            if excess <= 0:
                break
            if r.state in TERMINAL:
                del self.runs[run_id]
                excess -= 1

    # -- reading back -----------------------------------------------------------
    def load_archive(self) -> None:
        """Read back the runs in known storage paths, so a restarted head lists them."""
        paths = {default_storage_path()}
        try:
            paths |= set(json.loads((raynb_home() / "storage_paths.json").read_text()))
        except (OSError, ValueError, TypeError):
            pass
        self._storage_paths = set(paths)
        found = []
        for storage in paths:
            try:
                entries = list(os.scandir(os.path.expanduser(storage)))
            except OSError:
                continue
            for e in entries:
                if e.is_dir() and os.path.exists(os.path.join(e.path, "run.json")):
                    found.append((e.stat().st_mtime, e.path))
        # The newest ARCHIVE_LIMIT, added oldest first: prune drops from the front.
        for _, path in reversed(sorted(found, reverse=True)[:ARCHIVE_LIMIT]):
            try:
                self._archive_run(read_run_dir(path, with_reports=False))
            except (OSError, CorruptRunDirectory, ValueError) as e:  # another user's, or damaged
                log.warning("skipping run directory %s: %s", path, e)

    def _archive_run(self, rec: dict) -> Run:
        spec = {
            "num_workers": rec.get("world_size") or 1,
            "use_gpu": rec.get("use_gpu"),
            "max_failures": rec.get("max_failures"),
            "name_prefix": rec.get("kind"),
            "checkpoint_config": rec.get("checkpoint_config"),
            "experiment": rec.get("experiment"),
            "storage_uri": rec.get("storage_uri"),
        }
        path = rec["path"]
        run = Run(
            rec.get("run_id") or uuid.uuid4().hex,
            rec["name"],
            b"",
            spec,
            [],
            RunDirectory(os.path.dirname(path), os.path.basename(path)),
            state=rec.get("state", "FAILED"),
            submitted=rec.get("submitted") or 0.0,
            started=rec.get("started"),
            ended=rec.get("ended"),
            errors=list(rec.get("errors") or []),
            attempt=rec.get("attempt") or 0,
            failures=list(rec.get("failures") or []),
            failures_dropped=max(0, (rec.get("num_failures") or 0) - len(rec.get("failures") or [])),
            last_metrics=rec.get("metrics") or {},
            archived=True,
            peaks={
                int(r): p
                for r, p in (rec.get("peak_resources") or {}).items()
                if str(r).isdigit() and isinstance(p, dict)
            },
            reports=rec.get("num_reports") or 0,
        )
        run.store = CheckpointStore(path, spec["checkpoint_config"], rec.get("checkpoints"))
        if run.state not in TERMINAL:
            # The head that ran it died mid-run: the run is over, and says how to continue.
            run.state = "FAILED"
            run.add_failure({"message": HEAD_DIED})
            run.errors.append(
                {
                    "message": HEAD_DIED + "; continue it with TorchTrainer.restore(path) "
                    "or %%ray_train --resume"
                }
            )
            # Staged and never committed: not a checkpoint (as when a run ends), not kept.
            run.store.discard_staging()
            self.write_state(run)  # Result.from_path tells the same, with no head running
        self.runs.setdefault(run.run_id, run)
        return run

    def _remember_storage(self, storage: str) -> None:
        if storage in self._storage_paths:
            return
        self._storage_paths.add(storage)
        try:
            write_json_atomic(raynb_home() / "storage_paths.json", sorted(self._storage_paths))
        except OSError as e:
            log.warning("could not record storage path %s: %s", storage, e)

    # -- a run's life on disk ---------------------------------------------------
    def target(self, spec: dict) -> tuple[str, str, str]:
        """``(name, storage_path, run directory)`` of a submitted run (a run without a name
        gets a new one).

        Raises:
            RunRefused: a live run of this head has that name in that storage path."""
        name = spec.get("name") or make_run_name(spec.get("name_prefix", "TorchTrainer"))
        storage = os.path.expanduser(spec.get("storage_path") or default_storage_path())
        path = os.path.join(storage, name)
        live = [
            r
            for r in self._ticking.values()
            if r.name == name and r.state not in TERMINAL and str(r.rundir.path) == path
        ]
        if live:
            raise RunRefused(
                f"run {name!r} is still {live[0].state.lower()}; attach to it with "
                f"raynb.attach({name!r}), or cancel it first"
            )
        return name, storage, path

    def create(self, spec: dict, client: bytes, payload: list, function_bytes: bytes, resumed=None) -> Run:
        """The directory and record of a submitted run (or of a resumed one).

        Args:
            resumed (resume_files.ResumedFiles | None): for a resumed run (``spec["resume"]``),
                its directory as read off the loop (``run_resume``); None reads it here.

        Raises:
            RunRefused: the name is taken by a live run, or by a finished one that is not
                being resumed, or the run to resume cannot be read. Nothing was changed.
        """
        run_id = spec.get("run_id") or uuid.uuid4().hex
        name, storage, path = self.target(spec)
        if spec.get("resume") and resumed is None:
            try:
                resumed = read_for_resume(path)
            except (OSError, CorruptRunDirectory) as e:
                raise RunRefused(f"cannot resume run {name!r}: {e}. Nothing was changed in {path}") from None
        elif not spec.get("resume") and os.path.exists(os.path.join(path, "run.json")):
            raise RunRefused(
                f"a run named {name!r} already exists in {storage}; continue it with "
                f"TorchTrainer.restore({path!r}) or %%ray_train --name {name} --resume, or "
                "choose another name"
            )
        try:
            return self._create(spec, client, payload, function_bytes, run_id, name, storage, resumed)
        except OSError as e:
            if not isinstance(e, (RunFileError, PermissionError)):
                e = RunFileError(e.filename or path, e)
            raise RunRefused(f"cannot create run {name!r}: {e}") from None

    def _create(self, spec, client, payload, function_bytes, run_id, name, storage, resumed) -> Run:
        previous = resumed.previous if resumed is not None else None
        rundir = RunDirectory(storage, name)
        path = str(rundir.path)
        self._remember_storage(storage)
        run = Run(run_id, name, client, spec, payload, rundir)
        if spec.get("storage_uri"):
            self.uploads.open(run_id, spec["storage_uri"], name)
        run.store = CheckpointStore(
            path, spec.get("checkpoint_config"), previous.get("checkpoints") if previous else None
        )
        if previous is not None:
            rundir.load_existing(resumed)
            run.reports = len(rundir.rows)
            run.last_metrics = rundir.rows[-1] if rundir.rows else {}
            run.store.discard_staging()
            run.failures = list(previous.get("failures") or [])
            run.failures_dropped = max(0, (previous.get("num_failures") or 0) - len(run.failures))
            if previous.get("state") not in TERMINAL:
                # Its run.json still says it was active: the head that ran it died mid-run
                # (a live run of this head was refused above). That attempt failed too, and
                # the resumed run's Result.failures must not lose it.
                run.add_failure({"message": HEAD_DIED})
            run.failures_before = run.num_failures
        if previous is None:
            # Here, not later: a storage path that cannot hold it refuses the run (a full disk).
            rundir.write_params(spec.get("params", {}), self.links)
        # Written once the ranks have their tasks (write_after_start); queued last, so never for
        # a run refused here.
        # The empty report files: only for a run that started (a queued one holds no file open).
        later = [lambda: run.started and run.ended is None and rundir.prepare_files()]
        if not spec.get("experiment"):
            # What TorchTrainer.restore(path) re-runs. A Tune trial is resumed by
            # Tuner.restore(path, trainable), which ships the trainable again: none is kept.
            later.insert(0, lambda: rundir.write_function(function_bytes, self.links))
        if previous is not None:
            rundir.write_state(run.summary())
        else:
            self._state_due[run_id] = time.monotonic() + STATE_DELAY_S
        self._after_start += [(run, write) for write in later]
        self.runs[run_id] = run
        self._ticking[run_id] = run
        return run

    def write_after_start(self) -> None:
        """The files a run's start does not wait for (``function.pkl``, empty report files),
        written once its ranks have their tasks; a failure fails the run."""
        work, self._after_start = self._after_start, []
        for run, write in work:
            self._write_later(run, write)

    def _write_later(self, run: Run, write) -> None:
        try:
            write()
        except OSError as e:
            self._failed(run, e)
        except Exception as e:  # noqa: BLE001 - one run's files, never the head
            log.exception("run %s: writing its files failed", run.name)
            self._failed(run, RunFileError(run.rundir.path, OSError(0, f"{type(e).__name__}: {e}")))

    # -- writing, where a failure fails the run, never the head -----------------
    def _failed(self, run: Run, e: OSError) -> None:
        if not isinstance(e, RunFileError):
            e = RunFileError(e.filename or run.rundir.path, e)
        if run.write_error is not None:
            return  # said once; the run is failing already
        run.write_error = f"{e}: the run cannot keep its files, so it was stopped"
        log.error("run %s: %s", run.name, run.write_error)
        self.write_failed(run)

    def write_state(self, run: Run) -> None:
        self._state_due.pop(run.run_id, None)
        try:
            run.rundir.write_state(run.summary())
        except OSError as e:
            self._failed(run, e)

    def uploading(self, run: Run) -> bool:
        """Whether checkpoints of the run are still being copied to its storage URI (False
        once one failed: ``run.write_error`` then says so)."""
        self._upload_failed(run)
        return run.write_error is None and self.uploads.pending(run.run_id)

    def _upload_failed(self, run: Run) -> None:
        failed = self.uploads.error(run.run_id)
        if failed and run.write_error is None:
            run.write_error = f"{failed}: the run cannot store its checkpoints, so it was stopped"
            log.error("run %s: %s", run.name, run.write_error)
            self.write_failed(run)

    def flush(self, run: Run) -> None:
        """Write what waits: the rows of its reports, its output, a first run.json due;
        a failed upload to the run's storage URI fails the run."""
        self._upload_failed(run)
        due = self._state_due.get(run.run_id)
        if due is not None and time.monotonic() >= due:
            self.write_state(run)
        try:
            run.rundir.flush()
        except OSError as e:
            self._failed(run, e)

    def output(self, run: Run, rank: int, text: str, stream: str | None = None) -> None:
        if run.write_error is not None:
            return  # its files are beyond writing: the run is stopping
        try:
            run.rundir.append_output(rank, text, stream)
        except OSError as e:
            self._failed(run, e)

    def report(self, run: Run, rank: int, event: dict) -> None:
        """Rank ``rank``'s report ``event`` (metrics, and maybe a staged checkpoint).

        Rank 0's metrics become a row of ``result.json`` / ``progress.csv`` (with
        ``training_iteration`` and the times added, in ``event["metrics"]``)."""
        index = event.pop("index", None) or run.report_counts.get(rank, 0) + 1
        run.report_counts[rank] = index
        staged = event.pop("checkpoint", None)
        if staged and Path(staged).parent.parent != run.rundir.path / ".staging":
            # The head moves the files out and removes the parent: only ever in the run's own
            # .staging (train.session writes there).
            log.warning(
                "run %s: rank %d staged a checkpoint outside the run directory (%s); ignored",
                run.name,
                rank,
                staged,
            )
            staged = None
        if staged:
            if run.run_id in self._state_due:
                self.write_state(run)  # a run with state to resume from is on disk at once
            run.staged.setdefault(index, {})[rank] = staged
        if rank == 0:
            run.reports += 1
            try:
                metrics = run.rundir.append_result(event["metrics"], run.started, event.get("time"))
            except OSError as e:
                self._failed(run, e)
                metrics = event["metrics"]
            event["metrics"] = metrics
            run.last_metrics = metrics
            run.rank0_metrics[index] = metrics
            if len(run.rank0_metrics) > 64 and not run.staged:
                run.rank0_metrics = {index: metrics}

    def commit_checkpoints(self, run: Run, run_ended: bool = False) -> None:
        """Commit, in order, each staged checkpoint that every rank has reported past.

        ``run_ended``: every rank returned normally, so all its reports are in."""
        for index in sorted(run.staged):
            behind = [r for r in range(run.world_size) if run.report_counts.get(r, 0) < index]
            if behind and not run_ended:
                return
            try:
                run.rundir.flush()  # its report's row on disk before the checkpoint (a head killed)
                c = run.store.commit(list(run.staged.pop(index).values()), run.rank0_metrics.pop(index, {}))
            except OSError as e:
                self.emit(run, {"kind": "note", "text": f"checkpoint not saved: {e}"})
                self._failed(run, e)
                continue
            if run.spec.get("storage_uri"):
                self.uploads.upload(run.run_id, c["path"], c["name"])
                for name in c["pruned"]:
                    self.uploads.delete(run.run_id, name)
            for old in [i for i in run.rank0_metrics if i < index]:
                del run.rank0_metrics[old]
            attr = run.store.score_attr
            if attr and attr not in c["metrics"] and not run.spec.get("_score_noted"):
                # A typo'd or never-reported score attribute ranked every checkpoint last, and
                # pruning silently kept the newest instead of the best.
                run.spec["_score_noted"] = True
                keys = sorted(k for k in c["metrics"] if k not in AUTO_FIELDS)
                self.emit(
                    run,
                    {
                        "kind": "note",
                        "text": (
                            f"{c['name']}: its report has no {attr!r} "
                            f"(it has {', '.join(keys) or 'no metrics'}); "
                            f"CheckpointConfig(checkpoint_score_attribute={attr!r}) ranks such checkpoints "
                            "last: pruning keeps the newest of them, not the best"
                        ),
                    },
                )
            self.emit(
                run,
                {
                    "kind": "checkpoint",
                    "index": c["index"],
                    "name": c["name"],
                    "path": run.checkpoint_path(c["name"]),
                    "metrics": c["metrics"],
                },
            )
            self.write_state(run)

    def run_ended(self, run: Run) -> None:
        """Close a run's files: what was staged and not committed is not a checkpoint. Its
        files still to write (ended in the drain it started in) are written first: its
        client may read them as soon as it hears of the end."""
        for write in [w for r, w in self._after_start if r is run]:
            self._write_later(run, write)
        self._after_start = [(r, w) for r, w in self._after_start if r is not run]
        run.store.discard_staging()
        self._state_due.pop(run.run_id, None)
        self.uploads.forget(run.run_id)
        for write in (
            lambda: run.rundir.write_error(run.errors if run.state == "FAILED" else None),
            run.rundir.close,
            lambda: run.rundir.write_state(run.summary()),
        ):
            try:
                write()
            except OSError as e:  # the run is over: say so once, go on closing
                self._failed(run, e)
