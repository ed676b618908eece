"""A resumed run (``TorchTrainer.restore``, ``%%ray_train --resume``, ``Tuner.restore``)
read off the head's loop.

Resuming continues the run's files, so the head reads its ``result.json`` and writes its
``progress.csv`` again: work that grows with the run's length (hundreds of thousands of
reports after a long run). On the loop it would hold every heartbeat and every other
client's run for seconds. So :meth:`ResumedRuns.submit_resumed` reads the directory on an
``offloop`` thread (``storage/resume_files.read_for_resume``), and the run is created and
queued on the loop once the read is done (``Head.accept_run``), as any other submit.
"""

from __future__ import annotations

from ..protocol import messages
from ..storage.resume_files import read_for_resume
from ..storage.rundir import CorruptRunDirectory
from .offloop import Busy
from .store import RunRefused


class ResumedRuns:
    """A ``Head`` mixin (its ``store``, ``offloop``, ``send``, ``accept_run``)."""

    def submit_resumed(self, msg: messages.Message, spec: dict) -> None:
        """Read the run directory ``spec`` resumes off the loop, then accept the run; a
        refusal (a live run of that name, a second resume of it under way, a directory
        that cannot be read, too much work queued) is sent as the submit's ``error``."""
        resuming = self._resuming
        try:
            name, _storage, path = self.store.target(spec)
        except RunRefused as e:
            return self._refuse_resume(msg, spec, str(e))
        if path in resuming:
            return self._refuse_resume(
                msg, spec, f"run {name!r} is being resumed already; attach to it with raynb.attach({name!r})"
            )
        spec["name"] = name
        try:
            self.offloop.submit(
                lambda: read_for_resume(path),
                lambda files, error: self._resume_read(msg, spec, path, files, error),
            )
        except Busy as e:
            return self._refuse_resume(msg, spec, str(e))
        resuming.add(path)

    def _resume_read(self, msg: messages.Message, spec: dict, path: str, files, error) -> None:
        """(the loop) The directory is read: the run is created and queued, or refused."""
        self._resuming.discard(path)
        if error is not None:
            if not isinstance(error, (OSError, CorruptRunDirectory)):
                error = f"{type(error).__name__}: {error}"
            return self._refuse_resume(
                msg, spec, f"cannot resume run {spec['name']!r}: {error}. Nothing was changed in {path}"
            )
        self.accept_run(msg, spec, files)

    def _refuse_resume(self, msg: messages.Message, spec: dict, message: str) -> None:
        self.send(msg.identity, messages.ERROR, {"run_id": spec.get("run_id"), "message": message})
