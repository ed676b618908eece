"""What an interrupted ``Tuner.fit()`` says and does.

Ray Tune returns the results so far from an interrupted ``fit()``, and a script goes on
with them. In a notebook that return made the cell succeed, and *Run All* went on to the
next cells a second after the user pressed stop. So in an IPython cell (a kernel, or
a terminal ``ipython``) ``fit()`` raises :class:`~raynb.errors.TuneInterrupted` (a
``KeyboardInterrupt``) after printing how to carry on; the results so far stay
reachable (``tuner.get_results()``, the exception's ``result_grid``). Elsewhere it
returns them, as Ray Tune does.
"""
from __future__ import annotations

import sys

from ..errors import TuneInterrupted

_SHELL_MODULE = "IPython.core.interactiveshell"


def in_ipython_cell() -> bool:
    """True while IPython runs a cell's code in this thread (its ``run_code`` is on the
    stack): a kernel's or a terminal's cell, or a magic called from one."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "run_code" and frame.f_globals.get("__name__") == _SHELL_MODULE:
            return True
        frame = frame.f_back
    return False


def report_interrupt(grid, done: int, unfinished: int, carry_on: str, results_at: str | None) -> TuneInterrupted | None:
    """Print how the interrupted experiment carries on; returns the exception ``fit()``
    raises inside an IPython cell, else None (``fit()`` returns ``grid``).

    Args:
        done, unfinished (int): trials that ended, trials PAUSED or PENDING.
        carry_on (str): how to carry on (``fit()`` again, or ``%%ray_tune``'s ``--resume``).
        results_at (str | None): where the notebook finds the ResultGrid (None: the Tuner's
            ``get_results()``)."""
    raising = in_ipython_cell()
    where = results_at or ("tuner.get_results()" if raising else "the ResultGrid returned")
    sys.stderr.write(f"Tuning interrupted: {done} trial(s) done, {unfinished} unfinished. The results so "
                     f"far: {where}; to carry on, {carry_on}\n")
    sys.stderr.flush()
    if not raising:
        return None
    return TuneInterrupted(f"tuning interrupted: {done} trial(s) done, {unfinished} unfinished; "
                           f"the results so far are in {where}", grid)


__all__ = ["in_ipython_cell", "report_interrupt"]
