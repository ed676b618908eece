"""Exceptions raised in the notebook for things that went wrong on the cluster."""
from __future__ import annotations


class RunError(RuntimeError):
    """A distributed run failed (as Ray Train's ``TrainingFailedError``).

    Attributes:
        run_name (str): the run's name (its directory under the storage path).
        errors (list[dict]): one entry per failure, in order. A rank's exception has
            ``rank``, ``pid``, ``hostname``, ``exc_type``, ``message`` and the remote
            ``traceback`` (formatted, with the cell's own line numbers); a dead worker
            has ``rank``, ``pid``, ``signal`` or ``exitcode`` and ``message``.
        result: the run's ``Result`` (metrics reported before the failure), or None.

    In IPython the remote traceback is what gets shown (``_render_traceback_``).
    """

    def __init__(self, run_name: str, errors: list[dict], result=None, state: str = "FAILED"):
        self.run_name = run_name
        self.errors = list(errors or [])
        self.result = result
        self.state = state
        super().__init__(self._summary())

    def _summary(self) -> str:
        if not self.errors:
            return f"run {self.run_name!r} {self.state.lower()}"
        parts = []
        for e in self.errors:
            if e.get("exc_type"):
                parts.append(f"rank {e.get('rank')} raised {e['exc_type']}: {e.get('message', '')}")
            else:
                parts.append(e.get("message", repr(e)))
        return f"run {self.run_name!r} failed: " + "; ".join(parts)

    @property
    def rank(self) -> int | None:
        """The rank of the first failure."""
        return self.errors[0].get("rank") if self.errors else None

    @property
    def remote_traceback(self) -> str:
        """The first failing rank's traceback, as formatted on the worker."""
        for e in self.errors:
            if e.get("traceback"):
                return e["traceback"]
        return ""

    def _render_traceback_(self) -> list[str]:
        lines = [f"RunError: {self._summary()}", ""]
        for e in self.errors:
            if e.get("traceback"):
                lines.append(f"--- remote traceback (rank {e.get('rank')}, pid {e.get('pid')} "
                             f"on {e.get('hostname')}) ---")
                lines.extend(e["traceback"].rstrip("\n").splitlines())
                lines.append("")
        return lines

    def __str__(self) -> str:
        tb = self.remote_traceback
        return self._summary() + (f"\n\nRemote traceback (rank {self.rank}):\n{tb}" if tb else "")


class ClusterError(RuntimeError):
    """The cluster could not be started, reached or used (says why and what to do)."""
