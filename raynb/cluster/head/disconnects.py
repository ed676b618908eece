"""A node agent whose connection to the head closed and that stays silent: lost after a
short grace, not after the heartbeat timeout.

The head's ROUTER socket is watched for closed connections (a ZeroMQ socket monitor's
``EVENT_DISCONNECTED``, whose value is the connection's file descriptor; each message from
a node agent carries the descriptor it came on, ``zmq.SRCFD``). A closed connection alone
proves nothing: a live agent's socket reconnects by itself after a network blip, and its
next heartbeat (one a second) clears the suspicion. So a node whose connection closed is
lost only when nothing came from it for ``DISCONNECT_GRACE_S`` after the close was seen
(two and a half heartbeats; times the node's interval where ``node_pace`` asked an idle node
for fewer). A node that stays connected is judged by its heartbeats alone,
however slow it is; a stall of the head's own loop counts as a sign of life of every node
(``loop_stall.discount``), so a busy head turns no suspicion into a loss either.
"""

from __future__ import annotations

import collections
import threading
import time

import zmq

# Seconds after its connection was seen closed that a node not heard from since is lost.
DISCONNECT_GRACE_S = 2.5


class Disconnects:
    """Which connection each node agent talks on, and the nodes whose connection closed."""

    def __init__(self, grace_s: float = DISCONNECT_GRACE_S):
        self.grace_s = grace_s
        self._fd_of: dict[str, int] = {}  # node id -> descriptor of its latest message
        self._closed_fds: collections.deque = collections.deque()  # (fd, when), from the monitor's thread
        self._closed: dict[str, float] = {}  # node id -> monotonic time its connection closed
        self._monitor = None
        self._thread: threading.Thread | None = None

    def watch(self, sock: zmq.Socket) -> None:
        """Watch ``sock`` (the head's ROUTER, with no other monitor) for closed connections,
        on a thread of its own."""
        # MONITOR_STOPPED too: the event that ends the thread when the watch is disabled.
        self._monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_MONITOR_STOPPED)
        self._thread = threading.Thread(target=self._watch, name="raynb-disconnects", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        from zmq.utils.monitor import recv_monitor_message

        try:
            while True:
                event = recv_monitor_message(self._monitor)
                if event["event"] == zmq.EVENT_MONITOR_STOPPED:
                    break
                self.fd_closed(int(event["value"]))
        except zmq.ZMQError:
            pass

    def fd_closed(self, fd: int) -> None:
        """The connection on descriptor ``fd`` closed just now (any thread). The time is
        taken here: a message that the loop reads later (from a new connection that got the
        same descriptor, or one of before the close) clears the suspicion, never causes it."""
        self._closed_fds.append((fd, time.monotonic()))

    def heard(self, node_id: str, frame) -> None:
        """A message (its first ``zmq.Frame``) came from node ``node_id``'s agent."""
        try:
            self._fd_of[node_id] = frame.get(zmq.SRCFD)
        except (zmq.ZMQError, AttributeError, TypeError):
            pass

    def lost(self, nodes, now: float) -> list[tuple[object, str]]:
        """``(node, why)`` for each of ``nodes`` (registry ``NodeInfo``) whose connection
        closed at least the grace before ``now`` (monotonic s) with nothing heard from it
        since."""
        while self._closed_fds:
            fd, when = self._closed_fds.popleft()
            for node_id, at in list(self._fd_of.items()):
                if at == fd:
                    self._closed.setdefault(node_id, when)
                    del self._fd_of[node_id]
        listed = {node.node_id: node for node in nodes}
        found = []
        for node_id, closed_at in list(self._closed.items()):
            node = listed.get(node_id)
            if node is None or node.last_seen > closed_at:  # forgotten, or reconnected
                del self._closed[node_id]
            # as many heartbeats' grace for a node asked to send fewer (node_pace.py)
            elif now - closed_at >= (grace := self.grace_s * getattr(node, "beat_s", 1.0)):
                del self._closed[node_id]
                found.append(
                    (
                        node,
                        f"lost: its connection to the head closed and it was not heard from "
                        f"within {grace:.1f}s (its host died, or its agent was killed)",
                    )
                )
        for node_id in [n for n in self._fd_of if n not in listed]:
            del self._fd_of[node_id]
        return found

    def close(self, sock: zmq.Socket) -> None:
        """Stop watching ``sock`` (the monitor's thread ends)."""
        if self._monitor is None:
            return
        try:
            sock.disable_monitor()
        except zmq.ZMQError:
            pass
        if self._thread is not None:
            self._thread.join(timeout=1)
        self._monitor.close(0)
        self._monitor = None
