"""Pick the progress view for where the code runs: a run's pane and a Tune
experiment's trial table, registered with ``raynb.client.views``.

Inside a Jupyter kernel: the ipywidgets `ProgressPane` / `TuneTablePane`. Anywhere
else (terminal IPython, scripts, tests): `TextProgress` / `TuneTableText`. The environment variable
``RAYNB_PROGRESS`` overrides the choice: ``widget``, ``text`` or ``none``
(``none`` still feeds the model, so results and summaries stay right).
"""

from __future__ import annotations

import os
import warnings

from .run_pane.model import RunProgress

ENV_VAR = "RAYNB_PROGRESS"


class NullProgress:
    """A view that shows nothing but still feeds the model."""

    def __init__(self, progress: RunProgress):
        self.progress = progress

    def display(self) -> None:
        pass

    def handle(self, event: dict) -> None:
        self.progress.on_event(event)

    def refresh(self, force: bool = False) -> bool:
        return False

    def finish(self) -> None:
        pass


def in_jupyter_kernel() -> bool:
    """True when running in an IPython kernel that has a frontend (Jupyter,
    VS Code, Colab), where widgets can render."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    return getattr(shell, "kernel", None) is not None or type(shell).__name__ == "ZMQInteractiveShell"


def _view_kind() -> str:
    """``none``, ``widget`` or ``text``: ``$RAYNB_PROGRESS``, else a widget in a Jupyter
    kernel and text elsewhere."""
    choice = os.environ.get(ENV_VAR, "").strip().lower()
    if choice not in ("", "auto", "widget", "text", "none"):
        warnings.warn(f"{ENV_VAR}={choice!r} is not one of widget, text, none; choosing automatically")
        choice = ""
    if choice in ("", "auto"):
        return "widget" if in_jupyter_kernel() else "text"
    return choice


def progress_display(progress: RunProgress, **kwargs):
    """The view for ``progress``: a `ProgressPane` in a Jupyter kernel, else a
    `TextProgress`; ``$RAYNB_PROGRESS`` (widget|text|none) overrides. Extra
    keyword arguments (e.g. ``min_interval_s``) go to the chosen view.
    The caller still calls ``display()``, then ``handle(event)`` per event,
    then ``finish()``."""
    kind = _view_kind()
    if kind == "none":
        return NullProgress(progress)
    if kind == "widget":
        try:
            from .run_pane.widget import ProgressPane
        except ImportError:  # ipywidgets missing: text still works
            pass
        else:
            return ProgressPane(progress, **kwargs)
    from .run_pane.text import TextProgress

    return TextProgress(progress, **kwargs)


class NullTuneDisplay:
    """verbose=0 (or RAYNB_PROGRESS=none): shows nothing."""

    def __init__(self, progress):
        self.progress = progress
        self.redraws = 0

    def display(self) -> None:
        pass

    def update(self) -> None:
        pass

    def finish(self) -> None:
        self.progress.end()


def tune_display(progress, verbose: int = 1, **kwargs):
    """The trial table view for ``progress``.

    ``verbose`` 0 (or ``$RAYNB_PROGRESS=none``): a `NullTuneDisplay`. Otherwise
    a `TuneTablePane` (ipywidgets) in a Jupyter kernel or with
    ``$RAYNB_PROGRESS=widget``, else a `TuneTableText`. Extra keyword arguments
    (``min_interval_s``, ``clock``, ...) go to the chosen view. The driver calls
    ``display()`` once, ``update()`` after every batch of events (cheap: the
    views throttle themselves), and ``finish()`` at the end.
    """
    if not verbose:
        return NullTuneDisplay(progress)
    kind = _view_kind()
    if kind == "none":
        return NullTuneDisplay(progress)
    if kind == "widget":
        try:
            from .trial_table.widget import TuneTablePane
        except ImportError:  # ipywidgets missing: text still works
            pass
        else:
            return TuneTablePane(progress, **kwargs)
    from .trial_table.text import TuneTableText

    return TuneTableText(progress, **kwargs)


def make_run_view(
    name: str,
    world_size: int,
    total_epochs: int | None = None,
    verbose: int = 1,
    history=(),
    raises: bool = False,
):
    """``raynb.client.views``' run factory: a fresh `RunProgress` fed ``history``, in
    the view ``progress_display`` picks (or none for ``verbose=0``)."""
    progress = RunProgress(name, world_size, total_epochs=total_epochs, error_raised=raises)
    for event in history:
        progress.on_event(event)
    return progress_display(progress) if verbose else NullProgress(progress)


def make_tune_view(metric, mode, total_workers: int, varying_keys, verbose: int = 1):
    """``raynb.client.views``' Tune factory: a `TuneProgress` in the view ``tune_display`` picks."""
    from .trial_table.model import TuneProgress

    return tune_display(TuneProgress(metric, mode, total_workers, varying_keys), verbose)


__all__ = [
    "progress_display",
    "NullProgress",
    "in_jupyter_kernel",
    "tune_display",
    "NullTuneDisplay",
    "make_run_view",
    "make_tune_view",
]
