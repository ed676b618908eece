"""How often each remote node agent sends its heartbeat (``node_stats``), as the head asks.

A node whose workers run nothing has nothing new to say each second, and a head holding
many such nodes spent most of its idle time taking their heartbeats (one wake-up, one
signature and one schema check each). So the head asks a remote node that has been idle
for ``IDLE_AFTER_S`` to send one every ``RAYNB_IDLE_HEARTBEAT_S`` seconds instead, and
asks it back to ``BUSY_HEARTBEAT_S`` the moment one of its workers takes a task (the agent
then sends one at once: the head hears from a node right when a run is placed there).

The ask rides in a ``pong``'s ``stats_every`` (an agent that does not know the field keeps
its one a second, which the head always accepts). ``NodeInfo.beat_s`` is what the head last
asked of the node: how long it waits before it suspects the node (``SUSPECT_S``) or holds it
lost (``RAYNB_NODE_TIMEOUT_S``) is scaled by it, so the same number of missed heartbeats
marks an idle node as a busy one. The local node agent (the head's own child, whose exit
the head sees at once) keeps one a second.
"""

from __future__ import annotations

import time

from .. import settings
from ..protocol import messages
from .local_node import LOCAL_NODE_ID
from .registry import NodeInfo, Registry

# A node whose workers run tasks sends a heartbeat this often (s): the agent's default.
BUSY_HEARTBEAT_S = 1.0
# A node is asked to slow down once none of its workers ran a task for this long (s), so a
# sweep's nodes, idle a moment between trials, are not asked back and forth.
IDLE_AFTER_S = 10.0
# The longest interval the head asks for, whatever the setting says (s).
MAX_IDLE_HEARTBEAT_S = 10.0


def idle_heartbeat_s() -> float:
    """``$RAYNB_IDLE_HEARTBEAT_S`` (s), within [``BUSY_HEARTBEAT_S``, ``MAX_IDLE_HEARTBEAT_S``]."""
    value = settings.get("RAYNB_IDLE_HEARTBEAT_S")
    return min(MAX_IDLE_HEARTBEAT_S, max(BUSY_HEARTBEAT_S, value))


class NodePace:
    """Args:
    registry (Registry): the head's nodes and workers.
    send (callable): ``send(identity, msg_type, content)``, the head's signed send.
    """

    def __init__(self, registry: Registry, send):
        self.registry, self._send = registry, send
        self.idle_s = idle_heartbeat_s()
        self.asked = 0  # pace changes sent (for tests and benchmarks)

    def _busy(self, node_id: str) -> bool:
        return any(w.busy for w in self.registry.workers_of(node_id))

    def _ask(self, node: NodeInfo, every: float) -> None:
        node.beat_s = every
        self.asked += 1
        self._send(
            node.identity, messages.PONG, {"time": time.time(), "registered": True, "stats_every": every}
        )

    def busy_changed(self, node_ids, now: float) -> None:
        """(each tick, with the nodes whose count of busy workers changed) A node whose
        worker took a task is asked back to one heartbeat a second at once; one left with
        none busy starts its idle time."""
        for node_id in node_ids:
            node = self.registry.nodes.get(node_id)
            if node is None or node_id == LOCAL_NODE_ID:
                continue
            if self._busy(node_id):
                node.idle_at = None
                if node.beat_s > BUSY_HEARTBEAT_S:
                    self._ask(node, BUSY_HEARTBEAT_S)
            elif node.idle_at is None:
                node.idle_at = now

    def check(self, node: NodeInfo, now: float) -> None:
        """(from the head's walk over its nodes) Ask a node idle for ``IDLE_AFTER_S`` to
        send its heartbeats every ``idle_s``."""
        if (
            node.beat_s < self.idle_s
            and node.idle_at is not None
            and now - node.idle_at >= IDLE_AFTER_S
            and node.node_id != LOCAL_NODE_ID
        ):
            self._ask(node, self.idle_s)
