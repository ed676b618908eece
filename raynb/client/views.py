"""How runs and experiments reach a display, without depending on one.

The client, ``raynb.train`` and ``raynb.tune`` drive a *view*: for a run, an
object with ``display()``, ``handle(event)`` and ``finish()`` (and ``progress``, the
model it keeps); for a Tune experiment, one with ``display()``, ``update()`` and
``finish()``, whose ``progress`` takes ``add_trial``, ``set_status``, ``add_result``,
``set_workers``, ``note`` and ``end``. ``raynb.notebook`` implements both (a widget
pane in Jupyter, text elsewhere) and registers its factories when ``raynb`` is
imported. Layers below it never import it: they call :func:`run_view` and
:func:`tune_view`, and get views that show nothing if no display registered.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol


class RunView(Protocol):
    """What follows a run: fed every event of the run, in order."""

    progress: Any

    def display(self) -> None: ...
    def handle(self, event: dict) -> None: ...
    def finish(self) -> None: ...


class TuneView(Protocol):
    """What shows a Tune experiment's trial table; ``progress`` is fed by the driver."""

    progress: Any

    def display(self) -> None: ...
    def update(self) -> None: ...
    def finish(self) -> None: ...


class _Inert:
    """A model that takes every call and keeps nothing (no display registered)."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


class _NullView:
    def __init__(self) -> None:
        self.progress = _Inert()

    def display(self) -> None:
        pass

    def handle(self, event: dict) -> None:
        pass

    def update(self) -> None:
        pass

    def finish(self) -> None:
        pass


_run_factory: Callable[..., RunView] | None = None
_tune_factory: Callable[..., TuneView] | None = None
_show: Callable[[Any], None] | None = None


def register(run_factory: Callable[..., RunView], tune_factory: Callable[..., TuneView]) -> None:
    """Install the display: ``run_factory(name, world_size, total_epochs=None, verbose=1,
    history=(), raises=False)`` and ``tune_factory(metric, mode, total_workers, varying_keys, verbose=1)``."""
    global _run_factory, _tune_factory
    _run_factory, _tune_factory = run_factory, tune_factory


def run_view(
    name: str,
    world_size: int,
    total_epochs: int | None = None,
    verbose: int = 1,
    history: Iterable[dict] = (),
    raises: bool = False,
) -> RunView:
    """A view for run ``name`` of ``world_size`` ranks, not displayed yet.

    Args:
        total_epochs: the epochs its progress bars count to (None: unknown).
        verbose: 0 shows nothing (and feeds no model: nothing reads it).
        history: events that happened before this process followed the run
            (an attached run's earlier reports), given to the model first.
        raises: the caller raises a ``RunError`` naming a failure, so the view does
            not repeat it (the cell showed "rank 2 raised ValueError: boom" three times).
    """
    if _run_factory is None or not verbose:
        return _NullView()
    return _run_factory(
        name, world_size, total_epochs=total_epochs, verbose=verbose, history=history, raises=raises
    )


def tune_view(
    metric: str | None, mode: str | None, total_workers: int, varying_keys: list, verbose: int = 1
) -> TuneView:
    """A trial-table view for an experiment ranked by ``metric`` (``mode`` min|max)."""
    if _tune_factory is None:
        return _NullView()
    return _tune_factory(metric, mode, total_workers, varying_keys, verbose=verbose)


def register_show(show: Callable[[Any], None]) -> None:
    """Install how :func:`show` displays an object (``IPython.display.display``)."""
    global _show
    _show = show


def show(obj: Any) -> None:
    """Display ``obj`` after a run (its ``_repr_html_`` in a notebook), or print it when
    no display registered."""
    if _show is None:
        print(obj)
    else:
        _show(obj)
