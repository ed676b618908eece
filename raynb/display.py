"""Pick the progress view for where the code runs.

Inside a Jupyter kernel: the ipywidgets `ProgressPane`. Anywhere else
(terminal IPython, scripts, tests): `TextProgress`. The environment variable
``RAYNB_PROGRESS`` overrides the choice: ``widget``, ``text`` or ``none``
(``none`` still feeds the model, so results and summaries stay right).
"""
from __future__ import annotations

import os
import warnings

from .progress import RunProgress

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
    return (getattr(shell, "kernel", None) is not None
            or type(shell).__name__ == "ZMQInteractiveShell")


def progress_display(progress: RunProgress, **kwargs):
    """The view for ``progress``: a `ProgressPane` in a Jupyter kernel, else a
    `TextProgress`; ``$RAYNB_PROGRESS`` (widget|text|none) overrides. Extra
    keyword arguments (e.g. ``min_interval_s``) go to the chosen view.
    The caller still calls ``display()``, then ``handle(event)`` per event,
    then ``finish()``."""
    choice = os.environ.get(ENV_VAR, "").strip().lower()
    if choice not in ("", "auto", "widget", "text", "none"):
        warnings.warn(f"{ENV_VAR}={choice!r} is not one of widget, text, none; choosing automatically")
        choice = ""
    if choice == "none":
        return NullProgress(progress)
    if choice == "widget" or (choice in ("", "auto") and in_jupyter_kernel()):
        try:
            from .widgets import ProgressPane
        except ImportError:  # ipywidgets missing: text still works
            pass
        else:
            return ProgressPane(progress, **kwargs)
    from .text_progress import TextProgress
    return TextProgress(progress, **kwargs)


__all__ = ["progress_display", "NullProgress", "in_jupyter_kernel"]
