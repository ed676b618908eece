"""The client's one handler table: every message type the notebook's client receives
unasked -> the handler that acts on it, as a path ``"module.function"`` in this package
(``protocol/dispatch.py``), each concern module contributing its own. Importing
``raynb.client`` binds it once on every connection (``control.Client.handlers``): a
connection calls the handler, with itself and the message, wherever it waits (a request,
a fit's follow loop, Tune's loop) before ``recv`` returns the message.

The catalog (``protocol/catalog.py``) says which messages reach a client; a test checks
this table answers exactly those. Replies are read where their request waits
(``control.Client.request``; Tune reads its submits' ``run_accepted`` / ``error`` in its
loop); ``run_events`` and the events a ``run_done`` or ``run_accepted`` carries are
handed out one ``run_event`` each (``event_batch.expand``) before they are dispatched.
"""

from __future__ import annotations

import sys

from ..cluster.protocol import control, dispatch, messages
from . import bulk, followers  # noqa: F401 - the modules the paths name

HANDLERS: dict[str, str] = {
    # the nodes a run's ranks were placed on need its in-memory data: written, then
    # data_ready or data_failed (bulk.py)
    messages.DATA_NEEDED: "bulk.on_data_needed",
    # a run's messages, to whoever follows it: a fit's follow loop or Tune's (followers.py)
    messages.RUN_EVENT: "followers.on_run_event",
    messages.RUN_DONE: "followers.on_run_done",
    messages.RUN_RECORD: "followers.on_run_record",
}


def bound() -> dict:
    """``{message type: handler(client, message)}``: :data:`HANDLERS` looked up in this package.

    Raises:
        AttributeError: a path names no function (a table out of step with the code).
    """
    return dispatch.bind(sys.modules[__package__], HANDLERS)


control.Client.handlers = bound()
