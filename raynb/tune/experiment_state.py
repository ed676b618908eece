"""The experiment's state on disk: what ``Tuner.restore`` and ``ResultGrid`` read back.

``<experiment_path>/experiment_state.json`` lists every trial (config, status, directory,
checkpoint, error), rewritten atomically (a temporary file, then ``os.replace``) after each
batch of trial state changes, so a killed kernel leaves either the old or the new file,
never half of one. ``tuner.pkl`` holds the Tuner's settings (param_space, TuneConfig with its
search algorithm and scheduler, RunConfig), written once when ``fit()`` starts.

Each trial's reports live in its own directory (``result.json``, one JSON object per line,
written by the head), so this file stays small; a restore reads them back from there.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from pathlib import Path

import cloudpickle

from ..cluster.storage.rundir import CorruptRunDirectory, default_storage_path, private_opener, read_reports
from ..cluster.storage.storage_uri import local_storage_path
from .trial import Trial

STATE_FILE = "experiment_state.json"
TUNER_FILE = "tuner.pkl"
STATE_VERSION = 1
# Rebuilding the file's text is one join over every trial; spacing the rebuilds by this many
# times the last one's cost keeps them to 5% of the driver's time however many trials there are.
REBUILD_SPACING = 19.0
REBUILD_MAX_GAP_S = 5.0


def experiment_dir(name: str, storage_path: str | None = None) -> Path:
    """``<storage_path>/<name>``, absolute: where a Tuner keeps the experiment ``name``
    (``storage_path`` None: the default, ``~/raynb_results`` or ``$RAYNB_STORAGE_PATH``).

    Raises:
        ValueError: ``storage_path`` is an object store's URI: the notebook writes the
            experiment directory, so it must be a local (or mounted) path.
    """
    return (
        Path(local_storage_path(storage_path or default_storage_path(), "Tuner")).expanduser().absolute()
        / name
    )


def _encode_config(config) -> dict:
    """The config as JSON when it survives a JSON round trip unchanged, else as a pickle."""
    try:
        if json.loads(json.dumps(config)) == config:
            return {"config": config}
    except (TypeError, ValueError):
        pass
    return {"config_pickle": base64.b64encode(cloudpickle.dumps(config)).decode()}


def _decode_config(entry: dict):
    if "config_pickle" in entry:
        return cloudpickle.loads(base64.b64decode(entry["config_pickle"]))
    return entry.get("config", {})


def _json_default(value):
    return repr(value)


class ExperimentState:
    """Keeps the serialized form of each trial and writes the state file when asked.

    Args:
        path (str): the experiment directory.
        header (dict): experiment-wide fields (name, metric, mode, num_samples, ...).

    Only trials marked with :meth:`mark` are serialized again, so building the file costs
    one join of cached strings; that join grows with the trials, so it is done at most once
    every ``REBUILD_SPACING`` times its own cost (capped at ``REBUILD_MAX_GAP_S``), and always
    at :meth:`close`. The file itself is written
    by a background thread (a rename on a busy disk can take milliseconds, which the driver
    loop should not wait for); if writes come faster than the disk takes them, only the
    latest state is written. :meth:`close` waits until it is on disk.
    """

    def __init__(self, path: str, header: dict):
        self.path = Path(path)
        self.header = dict(header)
        self._entries: dict[str, str] = {}
        self._order: list[str] = []
        self._dirty: dict[str, Trial] = {}
        self._cond = threading.Condition()
        self._pending_text: str | None = None
        self._busy = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._next_build = 0.0  # time.monotonic() from which the next rebuild is due
        self._unbuilt = False  # changes not yet in a rebuilt text
        self.rebuilds = 0  # texts built so far (the test of the spacing reads it)

    def mark(self, trial: Trial) -> None:
        """``trial`` changed (status, config, checkpoint, error): serialize it at the next write."""
        if trial.trial_id not in self._entries and trial.trial_id not in self._dirty:
            self._order.append(trial.trial_id)
        self._dirty[trial.trial_id] = trial

    @property
    def dirty(self) -> bool:
        """Changes not yet in the file's text (marked trials, or a rebuild still due)."""
        return bool(self._dirty) or self._unbuilt

    def write(self, force: bool = False, **header) -> None:
        """Queue the state file for an atomic rewrite (tmp + rename) with ``header`` updated;
        unless ``force``, a rewrite sooner than its spacing allows waits for a later call or
        :meth:`close`.

        Raises:
            OSError: an earlier write failed (disk full, directory removed)."""
        self.header.update(header)
        for tid, trial in self._dirty.items():
            self._entries[tid] = json.dumps(_trial_entry(trial), default=_json_default)
        self._dirty.clear()
        self._unbuilt = True
        t0 = time.monotonic()
        if not force and t0 < self._next_build:
            return
        head = json.dumps(
            {**self.header, "version": STATE_VERSION, "timestamp": time.time()}, default=_json_default
        )
        text = head[:-1] + ', "trials": [\n' + ",\n".join(self._entries[t] for t in self._order) + "\n]}\n"
        now = time.monotonic()
        self._next_build = now + min(REBUILD_MAX_GAP_S, (now - t0) * REBUILD_SPACING)
        self._unbuilt = False
        self.rebuilds += 1
        with self._cond:
            self._raise_error()
            self._pending_text = text
            if self._thread is None:
                self._thread = threading.Thread(target=self._writer, name="raynb-tune-state", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def close(self, timeout: float = 30.0) -> None:
        """Wait until the latest state is on disk and stop the writer thread.

        Raises:
            OSError: the last write failed."""
        if self._unbuilt:
            self.write(force=True)
        with self._cond:
            deadline = time.monotonic() + timeout
            while (self._pending_text is not None or self._busy) and self._error is None:
                if not self._cond.wait(max(0.0, deadline - time.monotonic())):
                    break
            self._pending_text = None
            thread, self._thread = self._thread, None
            self._cond.notify_all()
            self._raise_error()
        if thread is not None:
            thread.join(timeout)

    def _raise_error(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise OSError(f"could not write {self.path / STATE_FILE}: {err}") from err

    def _writer(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cond:
                while self._pending_text is None and self._thread is me:
                    self._cond.wait()
                if self._pending_text is None:
                    return  # closed
                text, self._pending_text = self._pending_text, None
                self._busy = True
            try:
                tmp = self.path / (STATE_FILE + ".tmp")
                with open(tmp, "w", opener=private_opener) as f:
                    f.write(text)
                os.replace(tmp, self.path / STATE_FILE)
            except OSError as e:
                with self._cond:
                    self._error = e
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


def _trial_entry(t: Trial) -> dict:
    extra = {k: v for k, v in t.extra.items() if not k.startswith("_")}
    return {
        "trial_id": t.trial_id,
        **_encode_config(t.config),
        "status": t.status,
        "run_id": t.run_id,
        "path": t.path,
        "checkpoint": t.checkpoint,
        "error": t.error,
        "last_result": t.last_result,
        "extra": extra,
    }


def trainable_header(name: str, scaling) -> dict:
    """What the state header says of the trainable: its name and each trial's ranks and GPUs."""
    return {"trainable": name, "num_workers": scaling.num_workers, "use_gpu": bool(scaling.use_gpu)}


def check_same_trainable(header: dict, name: str, scaling) -> None:
    """As Ray Tune's ``Tuner.restore``: the trainable must be the experiment's own. One with
    other ranks or GPUs per trial would resume rank-sharded checkpoints on the wrong world.

    Raises:
        ValueError: it differs, naming what the experiment ran and what was given."""
    given = trainable_header(name, scaling)
    stored = {k: header[k] for k in given if k in header}  # older experiments: the name only
    if any(given[k] != v for k, v in stored.items()):

        def say(d):
            return (
                f"{d.get('trainable')!r} on {d.get('num_workers', '?')} worker(s) per trial"
                f"{' with GPUs' if d.get('use_gpu') else ''}"
            )

        raise ValueError(
            f"Tuner.restore: the experiment ran {say(stored)}, but the trainable given is "
            f"{say(given)}. Pass the trainable the experiment was started with (the same "
            "function or TorchTrainer, and ScalingConfig)"
        )


def read_tuner_file(path: str) -> dict | None:
    p = Path(path) / TUNER_FILE
    if not p.exists():
        return None
    return cloudpickle.loads(p.read_bytes())


def read_state(path: str) -> tuple[dict, list[Trial]]:
    """(header, trials) from ``<path>/experiment_state.json``; each trial's ``results`` are
    read back from its directory's ``result.json``.

    Raises:
        FileNotFoundError: ``path`` holds no experiment state (naming what was expected).
        ValueError: the file is not a raynb experiment state.
    """
    p = Path(path).expanduser() / STATE_FILE
    if not p.exists():
        raise FileNotFoundError(
            f"{str(Path(path).expanduser())!r} holds no {STATE_FILE}: give the directory "
            "of a Tune experiment (ResultGrid.experiment_path)"
        )
    try:
        data = json.loads(p.read_text())
        entries = data.pop("trials")
    except (ValueError, KeyError) as e:
        raise ValueError(f"{p} is not a raynb experiment state: {e}") from None
    trials = []
    for e in entries:
        # "STOPPED", stored before raynb took Ray's statuses, is Ray's TERMINATED (stopped early).
        status, extra = e["status"], e.get("extra") or {}
        if status == "STOPPED":
            status, extra = "TERMINATED", {**extra, "early_stopped": True}
        t = Trial(
            e["trial_id"],
            _decode_config(e),
            status=status,
            path=e.get("path"),
            run_id=e.get("run_id"),
            checkpoint=e.get("checkpoint"),
            error=e.get("error"),
            extra=extra,
        )
        t.results = read_results(t.path) if t.path else []
        if not t.results and e.get("last_result"):
            t.results = [e["last_result"]]
        trials.append(t)
    return data, trials


def read_results(trial_path: str) -> list[dict]:
    """Every report in ``<trial_path>/result.json`` ([] when it cannot be read)."""
    try:
        return read_reports(Path(trial_path))
    except CorruptRunDirectory:
        return []
