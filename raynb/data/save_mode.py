"""``SaveMode``: what a write does when its destination exists (Ray's names and values)."""

from __future__ import annotations

from enum import Enum


class SaveMode(str, Enum):
    """What a file write does when the directory already exists.

    ``CREATE`` / ``ERROR``: raise; ``APPEND``: add files beside the old ones; ``OVERWRITE``:
    remove what is there first; ``IGNORE``: write nothing. ``UPSERT`` is for tables
    (not files) and is refused by the file datasinks."""

    CREATE = "create"
    APPEND = "append"
    OVERWRITE = "overwrite"
    IGNORE = "ignore"
    ERROR = "error"
    UPSERT = "upsert"


__all__ = ["SaveMode"]
