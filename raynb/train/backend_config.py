"""``ray.train.BackendConfig`` and ``ray.train.LoggingConfig`` on raynb.

In Ray a ``BackendConfig`` subclass (``TorchConfig``, ``XGBoostConfig``, ...) says how to set a
framework up on the worker group; raynb's warm ranks form torch's process group before a run
and each framework's trainer sets up its own part, so these classes carry Ray's fields and
are checked, and a trainer given one says once that raynb sets the group up itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass


class BackendConfig:
    """Base of a framework's setup settings (Ray's ``BackendConfig``)."""

    @property
    def backend_cls(self):
        """Ray's ``Backend`` class for this config: none on raynb (its ranks are set up warm)."""
        return None

    @property
    def framework(self) -> str | None:
        """The framework's name (``"torch"``, ``"xgboost"``, ...), or None."""
        return None

    def to_dict(self) -> dict:
        """The settings, as Ray's ``to_dict`` (a subclass adds its fields)."""
        return {}


@dataclass
class LoggingConfig:
    """Ray Train's log level for its own logs (``RunConfig(logging_config=...)``).

    Args:
        log_level (str): a ``logging`` level name, any case; kept upper case.

    Raises:
        ValueError: not a level name (the valid names listed).
    """

    log_level: str = "INFO"

    def __post_init__(self):
        names = logging.getLevelNamesMapping()
        if not isinstance(self.log_level, str) or self.log_level.upper() not in names:
            raise ValueError(
                f"LoggingConfig(log_level={self.log_level!r}): give one of {', '.join(sorted(names))}"
            )
        self.log_level = self.log_level.upper()
