"""A rank's torch threads: its share of its node's cores, kept up to date while it runs.

The head gives each task ``num_threads``, the node's cores over the ranks busy there
when it starts, and sends ``set_threads`` when that count changes (another trial
started or ended on the node). A run that started alone on two cores has two
threads; once three more one-rank trials join it, one. The change is made on the
rank's main thread (OpenMP's thread count is per calling thread), at its next
``report()`` or line of output. A function that calls ``torch.set_num_threads``
itself keeps its choice for the rest of the task.
"""
from __future__ import annotations


class ThreadShare:
    def __init__(self):
        # The head's latest share, ((run_id, attempt), n): written by the I/O thread, also
        # before the task it is for has started here (then the task starts with it).
        self._latest: tuple | None = None
        self._task: tuple | None = None  # (run_id, attempt) of the running task
        self._ours: int | None = None    # what raynb set; None: the function chose its own

    def want(self, task: tuple, n: int) -> None:
        """From the I/O thread: the head's new share for ``task``."""
        self._latest = (task, n)

    def start(self, task: tuple, n: int) -> None:
        """Before the function, on the main thread: ``n`` threads, or the head's newer share."""
        import torch

        latest = self._latest
        if latest is not None and latest[0] == task:
            n = latest[1]
        self._task, self._ours = task, n
        # Checked against torch itself, not what we last set: the previous run's code may
        # have called torch.set_num_threads, which must not leak into this run.
        if n != torch.get_num_threads():
            torch.set_num_threads(n)

    def end(self) -> None:
        self._task = self._ours = None

    @property
    def pending(self) -> bool:
        """A new share to apply (cheap: checked on every event the main thread sends)."""
        latest = self._latest
        return (self._ours is not None and latest is not None and latest[0] == self._task
                and latest[1] != self._ours)

    def apply(self) -> None:
        """On the main thread: take the new share, unless the function set its own count."""
        import torch

        latest = self._latest
        if not self.pending or latest is None:
            return
        if torch.get_num_threads() != self._ours:
            self._ours = None  # torch.set_num_threads in the function: it wins
            return
        torch.set_num_threads(latest[1])
        self._ours = latest[1]
