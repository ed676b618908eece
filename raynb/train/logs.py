"""``Result.logs``: a run's output, the recent tail at hand and every rank's full output
on call.

It stays the list it always was (the tail of ``output.log``, lines tagged ``(rank N)``),
so ``"(rank 0) done" in result.logs`` keeps working; calling it reads the run
directory, where the head keeps every line of every rank::

    result.logs(rank=2)                    # all rank 2 printed, stdout and stderr
    result.logs(rank=2, stream="stderr")   # only its stderr
    result.logs()                          # every rank, tagged, in arrival order
"""
from __future__ import annotations

import json
from pathlib import Path

from ..cluster.storage.run_logs import check_selection, read_output


class RunLogs(list):
    """The tail of a run's output (a list of tagged lines), callable for the whole of it.

    Args:
        lines: the tail, as ``read_run_dir`` returns it in ``output``.
        path (str | None): the run directory.
        world_size (int | None): the run's ranks (read from ``run.json`` when None).
    """

    def __init__(self, lines=(), path: str | None = None, world_size: int | None = None):
        super().__init__(lines)
        self.path = path
        self.world_size = world_size

    def __call__(self, rank: int | None = None, stream: str | None = None) -> str:
        """Every line a rank wrote, from the run directory's ``output.log``.

        Args:
            rank (int | None): a rank of the run; None for every rank, each line
                tagged ``(rank N)`` or ``(rank N, stderr)``.
            stream (str | None): ``"stdout"`` or ``"stderr"`` only; None for both.

        Returns:
            str: the lines, in the order the head received them, each ended by a
            newline (a rank's lines without their tag); ``""`` when it printed nothing.

        Raises:
            ValueError: ``rank`` is not a rank of this run, or ``stream`` is not one.
            FileNotFoundError: the run directory is not on this machine (a remote
                head's storage path is on its file system).
        """
        if not self.path:
            raise FileNotFoundError("this Result has no run directory to read logs from")
        check_selection(rank, stream, self.world_size or _world_size(self.path))
        return read_output(self.path, rank, stream)


def _world_size(path: str) -> int | None:
    try:
        n = json.loads((Path(path) / "run.json").read_text()).get("world_size")
    except (OSError, ValueError, AttributeError):
        return None
    return n if isinstance(n, int) else None
