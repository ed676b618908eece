"""A run's directory on disk, in Ray Train's layout.

``<storage_path>/<run name>/``: ``params.json`` (the run's config),
``result.json`` (one JSON object per rank-0 report), ``progress.csv`` (the same
as a table), ``checkpoint_000NNN/``, ``error.txt`` when the run failed, and
raynb's own ``run.json`` (state, failures, checkpoint list), ``output.log``
(every rank's output, ``run_logs``) and ``function.pkl`` (what ``restore`` re-runs).

They hold pickled functions and data: the directory is created 0700 and every
file raynb writes in it 0600, whatever the umask.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from . import record_tail
from .made_ahead import spare_files
from .private_files import (
    RunFileError,
    aside,
    private_opener,
    write_json_atomic,
    writing,
)
from .private_files import (
    json_default as _json_default,
)
from .progress_table import ProgressTable
from .run_logs import OUTPUT_FILE, tag_lines
from .storage_uri import join_uri


def default_storage_path() -> str:
    """``$RAYNB_STORAGE_PATH`` or ``~/raynb_results`` (as Ray's ``~/ray_results``)."""
    return os.environ.get("RAYNB_STORAGE_PATH") or str(Path.home() / "raynb_results")


def make_run_name(prefix: str = "TorchTrainer") -> str:
    """``<prefix>_<date>_<time>_<6 hex>``: unique even for runs started in the same second."""
    return f"{prefix}_{time.strftime('%Y-%m-%d_%H-%M-%S')}_{os.urandom(3).hex()}"


STATE_FILE = "run.json"
FUNCTION_FILE = "function.pkl"
# A rank's line not ended by a newline is written once it is this long (characters).
PARTIAL_LINE_CHARS = 1 << 16
# How many lines of output a run record hands back (the file keeps everything).
OUTPUT_TAIL_LINES = 2000


def make_private_dir(path: Path) -> None:
    """``path`` (and missing parents of it inside an existing one), mode 0700.

    Raises:
        PermissionError: it exists and belongs to another user.
    """
    if not spare_files.take(path):  # a spare, in a block group where files are cheap
        try:
            path.mkdir(exist_ok=True, mode=0o700)
        except FileNotFoundError:  # parents too, each 0700 (mkdir(parents=True) gives them the umask's)
            missing = [path]
            while not missing[-1].parent.exists():
                missing.append(missing[-1].parent)
            for d in reversed(missing):
                d.mkdir(exist_ok=True, mode=0o700)
    st = os.stat(path)
    if st.st_uid not in (os.getuid(), 0):
        raise PermissionError(
            f"{path} belongs to another user (uid {st.st_uid}); "
            "raynb will not write a run's files into it: choose another name "
            "or storage_path"
        )
    if st.st_mode & 0o077 and st.st_uid == os.getuid():
        os.chmod(path, 0o700)  # made before (by hand, another umask): it will hold pickled code


class CorruptRunDirectory(ValueError):
    """A run directory lacks a file raynb needs, or has one it cannot read."""


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CorruptRunDirectory(
            f"{path} is missing: {path.parent} is not a complete raynb run directory ({what})"
        ) from None
    except (OSError, ValueError) as e:
        raise CorruptRunDirectory(f"{path} cannot be read ({e}): {what}") from None


def read_reports(path: Path) -> list[dict]:
    """The rows of ``result.json`` (a torn last line, from a crash mid-write, is skipped)."""
    rows = []
    try:
        with open(path / "result.json") as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue
    except FileNotFoundError:
        pass
    except OSError as e:
        raise CorruptRunDirectory(f"{path / 'result.json'} cannot be read: {e}") from None
    return rows


def read_output_tail(path: Path, lines: int = OUTPUT_TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of ``output.log``, read from its end (``record_tail``)."""
    return record_tail.tail_output(path, lines)


def read_run_dir(path, with_reports: bool = True) -> dict:
    """A run's record from its directory, with no cluster needed.

    Returns:
        ``run.json``'s fields (name, state, world_size, submitted, started, ended,
        failures, checkpoints, errors, ...) plus ``path``, ``params`` (from
        params.json), ``reports`` (result.json rows) and ``output`` (tail of output.log).

    Raises:
        CorruptRunDirectory: ``run.json`` or ``params.json`` is missing or unreadable
            (the message names the file).
        FileNotFoundError: ``path`` is not a directory.
    """
    p = Path(path).expanduser()
    if not p.is_dir():
        raise FileNotFoundError(f"{path}: no such run directory")
    if not (p / STATE_FILE).exists() and (p / "experiment_state.json").exists():
        # A Tune experiment, not a damaged run: the generic "is run.json missing, was it
        # copied whole?" sent the user looking for damage that is not there.
        trials = sorted(d.name for d in p.iterdir() if (d / STATE_FILE).is_file())
        raise CorruptRunDirectory(
            f"{p} is a Tune experiment directory, not a run directory: read all its trials with "
            f"raynb.tune.Tuner.restore({str(p)!r}, trainable).get_results(), or give one trial's "
            "directory" + (f" (e.g. {str(p / trials[0])!r})" if trials else "")
        )
    record = _read_json(
        p / STATE_FILE,
        "raynb writes it when a run starts; was this directory made by raynb, and copied whole?",
    )
    if not isinstance(record, dict) or "name" not in record:
        raise CorruptRunDirectory(f"{p / STATE_FILE} is not a raynb run record")
    record["params"] = _read_json(p / "params.json", "the run's config")
    record["path"] = str(p)
    for c in record.get("checkpoints", []):
        c["path"] = (
            join_uri(record["storage_uri"], record["name"], c["name"])
            if record.get("storage_uri")
            else str(p / c["name"])
        )
    if with_reports:
        record["reports"] = read_reports(p)
        record["output"] = read_output_tail(p)
    return record


class RunDirectory:
    """Writes one run's files. Args: storage_path (str), name (str, the run's directory name).

    Every write raises a :class:`RunFileError` naming the file when it fails (ENOSPC, ...)."""

    def __init__(self, storage_path: str, name: str):
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"run name {name!r} is not a valid directory name")
        self.path = Path(storage_path).expanduser() / name
        make_private_dir(self.path)
        # The files written at every run, as strings: a Path join per write cost more
        # than the write itself on a warm re-run's end.
        d = str(self.path)
        self._result_path, self._progress_path = (
            os.path.join(d, "result.json"),
            os.path.join(d, "progress.csv"),
        )
        self._state_path, self._output_path = os.path.join(d, STATE_FILE), os.path.join(d, OUTPUT_FILE)
        self._result = None
        self._output = None
        self._partial: dict[tuple, str] = {}  # (rank, stream) -> its line not ended yet
        self._rows: list[dict] = []
        self._unwritten: list[dict] = []  # rows not in the files yet (see flush)
        self._progress = ProgressTable(self._progress_path)
        self._last_time: float | None = None
        self.time_offset = 0.0  # seconds trained by earlier attempts (a resumed run)
        self._prepared = False  # prepare_files made the report files

    def load_existing(self, files=None) -> None:
        """Continue a resumed run's files: later reports append after its rows.

        Args:
            files (resume_files.ResumedFiles | None): the directory as read (off the head's
                loop) by ``resume_files.read_for_resume``, whose ``progress.csv`` it wrote
                again; None reads ``result.json`` here, and ``progress.csv`` is written again
                from its rows at the next write."""
        if files is None:
            self._rows = read_reports(self.path)
            self._progress.load(self._rows)
        else:
            self._rows = files.rows
            self._progress.adopt(files.columns)
        if self._rows:
            self.time_offset = float(self._rows[-1].get("time_total_s") or 0.0)

    @property
    def rows(self) -> list[dict]:
        return self._rows

    @property
    def unwritten(self) -> bool:
        """Rows wait to be written (:meth:`flush`)."""
        return bool(self._unwritten)

    def prepare_files(self) -> None:
        """Create the files a run's reports and end write (``result.json`` and
        ``progress.csv`` empty, as Ray Tune's loggers do at a trial's start, and the
        aside file of ``run.json``), so that its end, which the client waits for, only
        writes into them: a new inode can cost ext4 more than the rest of a re-run (see
        ``spare_files``)."""
        if self._result is None:
            with writing(self._result_path):
                self._result = open(self._result_path, "a", opener=private_opener)
        for path in (self._progress_path, aside(self._state_path)):
            with writing(path):
                os.close(private_opener(path, os.O_WRONLY | os.O_CREAT))
        self._prepared = True

    def write_state(self, record: dict) -> None:
        write_json_atomic(self._state_path, record)

    def write_function(self, payload: bytes, links=None) -> None:
        """``function.pkl``; ``links`` (``linked_files.LinkedFiles``): a hard link to an
        earlier run's file with the same bytes, when there is one."""
        self._write_bytes(os.path.join(self.path, FUNCTION_FILE), payload, links, atomic=True)

    def _write_bytes(self, path: str, data, links=None, atomic: bool = False) -> None:
        """``path`` holding ``data``: a new file (``atomic``: written aside, then renamed in,
        so a crash leaves no torn file), or a link (``links``). An existing file is
        replaced by rename, never written in place: its inode may be another run's too."""
        exists = os.path.exists(path)

        def write():
            target = aside(path) if atomic or exists else path
            with writing(path), open(target, "wb", opener=private_opener) as f:
                f.write(data)
            if target != path:
                with writing(path):
                    os.replace(target, path)

        if links is None or exists:
            write()
        else:
            with writing(path):
                links.write(path, data, write)

    def append_output(self, rank, text: str, stream: str | None = None) -> None:
        """Append a rank's output to ``output.log``, tagged (``run_logs.tag_lines``).

        A text not ended by a newline (``print(".", end="", flush=True)``) waits for the
        rest of its line (up to ``PARTIAL_LINE_CHARS``), so the file holds the line the
        rank printed, not a line per flush; the run's end writes what still waits."""
        key = (rank, stream)
        text = self._partial.pop(key, "") + text
        done, newline, rest = text.rpartition("\n")
        if rest and len(rest) < PARTIAL_LINE_CHARS:
            self._partial[key] = rest
            text = done + newline
        if text:
            self._write_output(rank, text, stream)

    def _write_output(self, rank, text: str, stream: str | None) -> None:
        with writing(self._output_path):
            if self._output is None:
                self._output = open(
                    self._output_path, "a", encoding="utf-8", errors="replace", opener=private_opener
                )
            self._output.write(tag_lines(rank, text, stream))

    def write_params(self, params: dict, links=None) -> None:
        """``params.json`` (as ``write_function``, ``links`` may make it a hard link)."""
        text = json.dumps(params, indent=2, default=_json_default)
        self._write_bytes(os.path.join(self.path, "params.json"), text.encode(), links)

    def append_result(self, metrics: dict, started: float | None, t: float | None) -> dict:
        """Add Ray's automatic fields to a rank-0 report, to be appended to the files.

        The rows are written in batches (:meth:`flush`: the head's tick, every 0.1 s
        while the run is live, a run record asked for, and :meth:`close` at the run's
        end, before the client hears of it), and before a checkpoint commits: a head
        killed mid-run loses at most the rows of its last tick, never a row that a
        committed checkpoint's report made.

        Returns the report as written: ``metrics`` plus ``training_iteration``
        (1-based), ``timestamp`` (s since epoch), ``time_total_s`` and
        ``time_this_iter_s`` (s).
        """
        now = t or time.time()
        started = started or now
        row = dict(metrics)
        row.setdefault("training_iteration", len(self._rows) + 1)
        row["timestamp"] = now
        row["time_total_s"] = now - started + self.time_offset
        row["time_this_iter_s"] = now - (self._last_time or started)
        self._last_time = now
        self._rows.append(row)
        self._unwritten.append(row)
        return row

    def _write_rows(self, final: bool = False) -> None:
        """Append the rows not written yet to ``result.json`` and ``progress.csv`` (which may
        hold them for a rewrite: ``progress_table``)."""
        rows, self._unwritten = self._unwritten, []
        if not rows and not self._progress.waiting:
            return
        if rows:
            with writing(self._result_path):
                if self._result is None:
                    self._result = open(self._result_path, "a", opener=private_opener)
                self._result.write("".join(json.dumps(row, default=_json_default) + "\n" for row in rows))
                self._result.flush()
        self._progress.write(rows, self._rows, final)

    def write_error(self, errors: list | None) -> None:
        if not errors:
            return
        with writing(self.path / "error.txt"), open(self.path / "error.txt", "w", opener=private_opener) as f:
            for e in errors:
                text = (e.get("traceback") or e.get("message")) if isinstance(e, dict) else e
                f.write(f"{text}\n\n")

    def flush(self) -> None:
        """Write the rows waiting (``append_result``) and flush ``output.log``."""
        self._write_rows()
        if self._output is not None:
            with writing(self._output_path):
                self._output.flush()

    def close(self) -> None:
        """Close the files (all of them, also when one fails: the first error is raised)."""
        failed = None
        partial, self._partial = self._partial, {}
        try:
            self._write_rows(final=True)
        except RunFileError as e:
            failed = e
        try:
            for (rank, stream), rest in partial.items():
                self._write_output(rank, rest, stream)
        except RunFileError as e:
            failed = failed or e
        try:
            self._progress.close()
        except RunFileError as e:
            failed = failed or e
        for name, path in (("_result", self._result_path), ("_output", self._output_path)):
            f = getattr(self, name)
            setattr(self, name, None)
            if f is not None:
                try:
                    with writing(path):
                        f.close()
                except RunFileError as e:
                    failed = failed or e
        if self._prepared and not self._rows:
            # No report came: the report files made for them are not left empty (a run
            # without reports has none, as before prepare_files made them ahead).
            for path in (self._result_path, self._progress_path):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    failed = failed or RunFileError(path, e)
        self._prepared = False
        # Every report's row is kept only to rewrite progress.csv when a new metric shows up;
        # once the run ended nothing writes here again (a resumed run reads its files back).
        # The head keeps up to 1000 ended runs: with their rows it held every report of each
        # (70 MiB for 40k small reports), growing with every experiment.
        self._rows = []
        if failed is not None:
            raise failed


def checkpoint_dir_name(index: int) -> str:
    """``checkpoint_000NNN``: Ray Train's name for a run's ``index``-th checkpoint."""
    return f"checkpoint_{index:06d}"
