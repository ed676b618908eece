"""Handlers the head's table gets from modules of their own concern, wired in one call
(``install``): jobs (``jobs.py``) and the node events a launcher reports (``node_lost``).
"""
from __future__ import annotations

import logging

from ..protocol import messages as P
from .jobs import Jobs

log = logging.getLogger("raynb.head")


def install(head) -> Jobs:
    """Add the jobs' and ``node_lost``'s handlers to ``head.handlers``; returns the
    :class:`Jobs` (the head's main stops their drivers when the head stops)."""
    jobs = Jobs(head.send, head.offloop)  # working directories unpacked off the loop
    head.handlers.update(jobs.handlers)
    head.handlers[P.NODE_LOST] = lambda msg: on_node_lost(head, msg)
    return jobs


def on_node_lost(head, msg: P.Message) -> None:
    """A launcher saw a node die (Ray reported its Ray node dead, or its agent actor
    gone): the node's ranks fail their runs now, through the same path as a node that
    stopped answering (``Head._lose_node``), instead of after ``NODE_TIMEOUT_S``.

    Only a client (a key holder's launcher) may say so; replies ``node_lost_reply``
    with whether the head knew the node."""
    if not msg.identity.startswith(b"client:"):
        log.warning("node_lost from %r ignored: only a launcher (a client) reports lost nodes",
                    msg.identity)
        return
    node = head.registry.nodes.get(msg.content["node_id"])
    if node is not None:
        head._lose_node(node, msg.content["reason"])
    head.send(msg.identity, P.NODE_LOST_REPLY, {"known": node is not None})
