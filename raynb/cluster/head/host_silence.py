"""A node whose agent and every one of its workers fell silent together is lost after half
the heartbeat timeout.

A host that vanishes without closing its connections (powered off, its network cut) sends
no FIN and no RST: the head sees only silence. Its node agent and each of its workers talk
to the head on connections of their own and send a sign of life every second (the agent's
``node_stats``, as ``node_pace`` asks; each worker's I/O thread its ``worker_alive``), from
separate processes. One of them falling silent is a slow or stopped process (an agent's
loop busy moving data, a rank holding the GIL) and is judged by the full
``RAYNB_NODE_TIMEOUT_S``; all of them falling silent at once is the host or the network to
it. So a remote node with at least one worker, whose agent has been silent for half the
timeout (times the agent's interval) and each of whose workers has been silent for half the
timeout (times each worker's interval: a second while it runs a task, the idle interval
between tasks), is lost then. The head's own stalls are not held
against anyone (``loop_stall.discount`` moves every ``last_seen``).
"""

from __future__ import annotations

from .node_pace import idle_heartbeat_s
from .registry import NodeInfo, Registry, WorkerInfo

# The part of RAYNB_NODE_TIMEOUT_S after which a node silent together with all its workers
# is lost: each of them then missed half as many heartbeats as one judged alone.
TOGETHER_FRACTION = 0.5
# Seconds between a busy worker's heartbeats (its I/O thread's ``worker.head_link``); an
# idle one (no run) beats every $RAYNB_IDLE_HEARTBEAT_S.
WORKER_BEAT_S = 1.0


def _worker_beat_s(worker: WorkerInfo) -> float:
    return WORKER_BEAT_S if worker.run_id is not None else max(WORKER_BEAT_S, idle_heartbeat_s())


def silent_hosts(registry: Registry, nodes: list[NodeInfo], now: float, timeout_s: float):
    """Yield ``(node, why)`` for each of ``nodes`` (remote nodes, still registered) that has
    workers and that fell silent together with all of them (see the module docstring).
    ``now``: monotonic s; ``timeout_s``: ``RAYNB_NODE_TIMEOUT_S``."""
    limit = timeout_s * TOGETHER_FRACTION
    for node in nodes:
        if registry.nodes.get(node.node_id) is not node:
            continue  # lost already, or registered again
        if now - node.last_seen <= limit * node.beat_s:
            continue
        workers = registry.workers_of(node.node_id)
        if not workers or any(now - w.last_seen <= limit * _worker_beat_s(w) for w in workers):
            continue
        yield (
            node,
            f"lost: neither its node agent nor any of its {len(workers)} workers was heard from "
            f"for {limit * node.beat_s:.1f}s (its host died, or the network to it is down)",
        )
