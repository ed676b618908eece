"""A process's handler table: each message type it receives -> the handler that acts on it,
written as an attribute path from the process's main object (``"on_hello"``,
``"transfers.on_file"``), so the table is plain data, readable in one place and testable
without a running process; :func:`bind` turns it into bound methods once, at start.

Each process declares its table beside its loop (the head's in ``head/handlers.py``);
``tests/cluster/protocol/test_handler_tables.py`` checks it against the messages the
``catalog`` says that process receives: exactly one handler each, none for a message it
never receives."""

from __future__ import annotations

import operator
from typing import Callable


def bind(owner: object, table: dict[str, str]) -> dict[str, Callable]:
    """``{message type: bound handler}``, each path of ``table`` looked up on ``owner``.

    Raises:
        AttributeError: a path names no attribute of ``owner`` (a table out of step with
            the code).
    """
    return {msg_type: operator.attrgetter(path)(owner) for msg_type, path in table.items()}
