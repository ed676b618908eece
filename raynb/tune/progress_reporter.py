"""Ray's progress reporters (``ray.tune.progress_reporter``), accepted as in Ray.

raynb draws its own live trial table (in a notebook, and as text in a terminal), so a
reporter given to ``RunConfig(progress_reporter=...)`` or ``tune.run(progress_reporter=...)``
has no effect: one line says so, once. Its arguments are kept, so a script's calls
(``add_metric_column`` ...) work.
"""

from __future__ import annotations


class ProgressReporter:
    """Base class of a progress reporter (``ray.tune.ProgressReporter``)."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs
        self.metric_columns: dict = (
            dict(kwargs.get("metric_columns") or {})
            if isinstance(kwargs.get("metric_columns"), dict)
            else {c: c for c in kwargs.get("metric_columns") or ()}
        )
        self.parameter_columns: dict = {}

    def add_metric_column(self, metric: str, representation: str | None = None) -> None:
        self.metric_columns[metric] = representation or metric

    def add_parameter_column(self, parameter: str, representation: str | None = None) -> None:
        self.parameter_columns[parameter] = representation or parameter

    def should_report(self, trials, done: bool = False) -> bool:
        return False

    def report(self, trials, done: bool, *sys_info) -> None:
        """Nothing: raynb's trial table reports."""

    def setup(self, *args, **kwargs) -> None:
        pass


class TuneReporterBase(ProgressReporter):
    pass


class CLIReporter(TuneReporterBase):
    """Ray's terminal table; raynb prints its own."""


class JupyterNotebookReporter(TuneReporterBase):
    """Ray's notebook table; raynb shows its own live table."""


__all__ = ["ProgressReporter", "TuneReporterBase", "CLIReporter", "JupyterNotebookReporter"]
