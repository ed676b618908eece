"""Committed checkpoints copied to a run's storage URI (``RunConfig(storage_path="s3://...")``).

The head commits a checkpoint into the run directory on its own disk (the staging copy,
``checkpoints.CheckpointStore``) and queues it here; one background thread copies it to
``<uri>/<run name>/checkpoint_NNNNNN/`` with ``pyarrow.fs.copy_files`` (as Ray Train's
``StorageContext`` uploads) and deletes there what ``CheckpointConfig(num_to_keep=...)``
pruned, in the order queued, so the head's loop never waits on the network. The head asks
:meth:`Uploads.pending` before it calls a run finished (its ``Result.checkpoint`` is then
in the store) and :meth:`Uploads.error` at each tick: a failed upload fails the run, with
the URI and the error, never the head.
"""
from __future__ import annotations

import logging
import os
import queue
import threading

from ..storage.storage_uri import join_uri, open_uri, redact

log = logging.getLogger("raynb.head")


class Uploads:
    """The head's upload queue and its thread (started at the first job; a daemon thread,
    ended with the head's process)."""

    def __init__(self):
        self._jobs: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._pending: dict[str, int] = {}     # run_id -> jobs queued or running
        self._errors: dict[str, str] = {}      # run_id -> the first failure's message
        self._roots: dict[str, tuple] = {}     # run_id -> (fs, root path, root uri); thread only
        self._thread: threading.Thread | None = None

    def open(self, run_id: str, uri: str, name: str) -> None:
        """Open ``uri`` for run ``run_id`` (its checkpoints go under ``<uri>/<name>/``);
        an unreachable store or a missing bucket fails the run at once."""
        self._submit(run_id, ("open", uri, name))

    def upload(self, run_id: str, local_dir: str, name: str) -> None:
        """Copy the committed checkpoint ``local_dir`` to ``<root>/<name>/``. One pruned
        from the staging directory before its turn came is skipped (its delete follows)."""
        self._submit(run_id, ("upload", local_dir, name))

    def delete(self, run_id: str, name: str) -> None:
        """Delete ``<root>/<name>/`` (a checkpoint that num_to_keep pruned)."""
        self._submit(run_id, ("delete", name))

    def pending(self, run_id: str) -> bool:
        """Whether jobs of the run are still queued or running."""
        with self._lock:
            return self._pending.get(run_id, 0) > 0

    def error(self, run_id: str) -> str | None:
        """The run's first failed job (a message naming the URI and the error), or None."""
        with self._lock:
            return self._errors.get(run_id)

    def forget(self, run_id: str) -> None:
        """Drop what is known of an ended run (its queued jobs still run, unreported)."""
        with self._lock:
            self._errors.pop(run_id, None)

    def _submit(self, run_id: str, job: tuple) -> None:
        with self._lock:
            self._pending[run_id] = self._pending.get(run_id, 0) + 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="raynb-uploads", daemon=True)
                self._thread.start()
        self._jobs.put((run_id, job))

    def _loop(self) -> None:
        while (item := self._jobs.get()) is not None:
            run_id, job = item
            try:
                with self._lock:
                    failed = run_id in self._errors
                if not failed:
                    self._do(run_id, job)
            except Exception as e:  # noqa: BLE001 - any failure fails the run, never the head
                log.error("run %s: checkpoint storage failed: %s", run_id, e)
                with self._lock:
                    self._errors.setdefault(run_id, str(e))
            finally:
                with self._lock:
                    self._pending[run_id] -= 1
                    if not self._pending[run_id]:
                        del self._pending[run_id]

    def _do(self, run_id: str, job: tuple) -> None:
        import pyarrow.fs as pafs

        if job[0] == "open":
            _, uri, name = job
            fs, path = open_uri(uri)
            self._roots[run_id] = (fs, f"{path.rstrip('/')}/{name}", join_uri(uri, name))
            return
        fs, root, root_uri = self._roots[run_id]
        if job[0] == "upload":
            _, local_dir, name = job
            try:
                pafs.copy_files(local_dir, f"{root}/{name}", destination_filesystem=fs)
            except (OSError, ValueError) as e:
                if not os.path.isdir(local_dir):
                    return  # pruned while waiting: its delete job is queued after this one
                raise OSError(f"could not upload checkpoint {name} to {redact(join_uri(root_uri, name))}: "
                              f"{e}") from None
        else:
            _, name = job
            try:
                fs.delete_dir(f"{root}/{name}")
            except FileNotFoundError:
                pass
            except OSError as e:
                raise OSError(f"could not delete pruned checkpoint {redact(join_uri(root_uri, name))}: "
                              f"{e}") from None
