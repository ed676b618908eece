"""The head's handlers for node agents and workers joining, reporting and vanishing.

A mixin of :class:`~raynb.cluster.head.server.Head` (its ``registry``, ``pool``,
``controller``, ``send``, ``schedule``): the node side of the socket loop, apart from
the run side that ``server.py`` keeps.

Losing a node: the local node agent is the head's child (its exit is seen at once), and
any other agent on this machine is watched (``node_exits``); a node whose connection to the
head closed and that stays silent is lost after a short grace (``disconnects``); one whose
agent and workers all fell silent together, after half the timeout (``host_silence``); a node on
another host sends stats every second (``node.STATS_INTERVAL_S``; less often while idle, as
``node_pace`` asks), and one silent ``REMOTE_NODE_TIMEOUT_S`` (5 s; ``$RAYNB_NODE_TIMEOUT_S``)
times its interval is lost: its ranks fail their runs naming the node, and a run with
``FailureConfig(max_failures=...)`` restarts on the nodes that remain.
"""

from __future__ import annotations

import logging
import time

from .. import settings
from ..procutil import describe_exit, signal_name
from ..protocol import messages
from ..protocol.rejects import REFUSED
from .host_silence import silent_hosts
from .local_node import LOCAL_NODE_ID
from .node_exits import NodeExits
from .registry import NodeInfo, WorkerInfo

log = logging.getLogger("raynb.head")

# The local node agent, on the head's own (possibly loaded) machine, is given longer.
NODE_TIMEOUT_S = 10.0
# The head logs a refused peer (wrong key or protocol version) at most this often (s).
REFUSALS_LOGGED_EVERY_S = 5.0
# A remote node silent this long (1.5 heartbeats) is suspected: a rank there that does not
# stop is not counted killed until its exit report or the node's loss says which it was.
SUSPECT_S = 1.5
# A node's stats closer together than this (s) are dropped unanswered: an agent sends one a
# second, and a flooding peer must not make the head answer and process each.
MIN_STATS_GAP_S = 0.2
# How often the head walks its nodes for silent ones (s): a small part of the timeouts above.
NODE_SCAN_S = 0.25
# A worker's exit, told by its node agent, fails its rank this long (s) after it arrives, not
# at once: what the worker sent just before it died (its last report, which may commit a
# checkpoint) comes on its own connection and may be read after the node's word.
EXIT_GRACE_S = 0.05


def remote_node_timeout_s() -> float:
    """Seconds of silence after which a node on another host is lost (default 5)."""
    return max(1.0, settings.get("RAYNB_NODE_TIMEOUT_S"))  # NaN or garbage: the default


# A node id whose agent was heard from this recently is live: another agent registering
# under it (a copy-paste --node-id) is refused. One silent longer (its host died, its pod
# was replaced) gives the id to the newcomer.
DUPLICATE_LIVE_S = 3.0


def _same_agent(old: NodeInfo, c: dict) -> bool:
    """Whether a registration comes from the agent that holds the id (a fresh socket after
    it lost the head): same host, same pid, same ``/dev/shm``."""
    return (old.hostname, old.pid, old.shm_id) == (c["hostname"], c["pid"], c.get("shm_id") or "")


class NodeEvents:
    """Node registration, stats, worker readiness and exits, losing a node."""

    # -- nodes and workers ------------------------------------------------------
    def on_node_register(self, msg: messages.Message) -> None:
        c = msg.content
        old = self.registry.nodes.get(c["node_id"])
        if old is not None and old.identity == msg.identity:
            return self.send(
                msg.identity, messages.PONG, {"time": time.time(), "registered": True}
            )  # a repeat
        if (
            old is not None
            and not _same_agent(old, c)
            and time.monotonic() - old.last_seen < DUPLICATE_LIVE_S
        ):
            return self._refuse_duplicate(msg.identity, old, c)
        if old is not None:
            # Its agent lost the head and registered again (a fresh socket): what the head
            # knew of its workers is stale (the agent ended them).
            self._lose_node(old, "registered again (its agent had lost the head and reconnected)")
        self.registry.add_node(
            NodeInfo(
                c["node_id"],
                msg.identity,
                c["hostname"],
                c["ip"],
                c["pid"],
                c["num_workers"],
                c["max_workers"],
                spawning=c["num_workers"],
                gpus=list(c.get("gpus", [])),
                cpus=int(c.get("cpus") or 0),
                shared_storage=bool(c.get("shared_storage", True)),
                data_port=c.get("data_port"),
                data_key=c.get("data_key"),
                shm_id=c.get("shm_id") or "",
                labels=dict(c.get("labels") or {}),
            )
        )
        if c["node_id"] != LOCAL_NODE_ID:  # (the local agent is the head's child: its exit is seen)
            self._node_exits().watch(self.registry.nodes[c["node_id"]])
        log.info(
            "node %s joined (%s, %s, %d workers, %d GPUs)",
            c["node_id"],
            c["hostname"],
            c["ip"],
            c["num_workers"],
            len(c.get("gpus", [])),
        )
        self.send(msg.identity, messages.PONG, {"time": time.time(), "registered": True})

    def _refuse_duplicate(self, identity: bytes, old: NodeInfo, c: dict) -> None:
        """Another live agent holds this node id: it keeps it (its runs go on), and the
        newcomer is told why (it exits, status 3); ``raynb status`` counts the refusals."""
        self.duplicate_nodes_refused = getattr(self, "duplicate_nodes_refused", 0) + 1
        text = (
            f"the head refused this node: node id {old.node_id!r} is held by a live node agent on "
            f"{old.hostname} ({old.ip}, pid {old.pid}); give this node agent its own --node-id"
        )
        log.warning(
            "refused a node agent on %s (%s, pid %s) registering as %r: that id is held by the "
            "live node agent on %s (%s, pid %s)",
            c["hostname"],
            c["ip"],
            c["pid"],
            old.node_id,
            old.hostname,
            old.ip,
            old.pid,
        )
        try:
            self.sock.send_multipart([identity, REFUSED, text.encode()])
        except Exception:  # noqa: BLE001 - best effort
            pass

    def on_worker_ready(self, msg: messages.Message) -> None:
        c = msg.content
        if c["node_id"] not in self.registry.nodes:
            return  # a worker of a node that was lost (its agent ends it)
        self.registry.add_worker(
            WorkerInfo(
                c["worker_id"],
                msg.identity,
                c["node_id"],
                c["pid"],
                c["hostname"],
                c["ip"],
                store_port=c.get("store_port"),
                kind=c.get("kind") or "torch",
                stats={k: c[k] for k in ("cpu_percent", "rss") if k in c},
            )
        )
        self.schedule()

    def on_node_stats(self, msg: messages.Message) -> None:
        node = self.registry.nodes.get(msg.content.get("node_id"))
        known = node is not None and node.identity == msg.identity
        now = time.monotonic()
        if known and now - node.stats_at < MIN_STATS_GAP_S:
            return  # a flood (an agent sends one a second): it counted as a sign of life, no more
        if known:
            node.stats_at = now
        # The node's sign of our life, when it asks (an agent that heard from the head lately
        # does not: answering each of 1,000 nodes' heartbeats was most of an idle head's work);
        # "registered": False tells an agent whose connection came back to a restarted head
        # (same address and keys) that it must register again, asked or not.
        if not known or msg.content.get("reply", True):
            self.send(msg.identity, messages.PONG, {"time": time.time(), "registered": known})
        if not known:
            return
        node.load = msg.content.get("load")
        self.pool.reshare(node.node_id)  # a share held back while others took the cores
        by_run = self.pool.observe(msg.content, now)
        for run_id, workers in by_run.items():
            run = self.runs.get(run_id)
            if run is not None and run.state == "RUNNING":
                for rank, stats in workers.items():
                    run.observe(rank, stats)
                self.emit(run, {"kind": "stats", "workers": workers})

    def on_worker_exited(self, msg: messages.Message) -> None:
        c = msg.content
        w = self.registry.remove_worker(c["worker_id"])
        how = c.get("reason") or describe_exit(c.get("exitcode"), c.get("signal"))
        log.info("worker %s (pid %s) %s", c["worker_id"], c["pid"], how)
        if w is not None and w.run_id is not None:
            fields = {"signal": signal_name(c.get("signal")), "exitcode": c.get("exitcode")}
            self.__dict__.setdefault("_exits_due", []).append(
                (time.monotonic() + EXIT_GRACE_S, w, how, fields)
            )
        self.pool.refill(c.get("node_id"))
        self.schedule()

    def on_node_lost(self, msg: messages.Message) -> None:
        """A launcher saw a node die (Ray reported its Ray node dead, or its agent actor
        gone): the node's ranks fail their runs now, through the same path as a node that
        stopped answering (:meth:`_lose_node`), instead of after ``NODE_TIMEOUT_S``.

        Only a client (a key holder's launcher) may say so; replies ``node_lost_reply``
        with whether the head knew the node."""
        if not msg.identity.startswith(b"client:"):
            log.warning(
                "node_lost from %r ignored: only a launcher (a client) reports lost nodes", msg.identity
            )
            return
        node = self.registry.nodes.get(msg.content["node_id"])
        if node is not None:
            self._lose_node(node, msg.content["reason"])
        self.send(msg.identity, messages.NODE_LOST_REPLY, {"known": node is not None})

    def lose_exited_ranks(self, now: float) -> None:
        """(each tick) Fail the ranks whose workers exited ``EXIT_GRACE_S`` ago or more."""
        due = self.__dict__.get("_exits_due")
        while due and due[0][0] <= now:
            _, w, how, fields = due.pop(0)
            self._rank_lost(w, how, **fields)

    def _rank_lost(self, w: WorkerInfo, how: str, **fields) -> None:
        """A worker died or vanished: the rank it held fails its run."""
        run = self.runs.get(w.run_id) if w.run_id is not None else None
        if run is not None:
            self.controller.rank_lost(
                run,
                w.rank,
                {
                    "rank": w.rank,
                    "pid": w.pid,
                    "hostname": w.hostname,
                    **fields,
                    "message": f"rank {w.rank} (pid {w.pid} on {w.hostname}) {how}",
                },
            )

    def _lose_node(self, node: NodeInfo, why: str) -> None:
        """Forget a dead or silent node and its workers; their runs fail naming the node."""
        log.warning("node %s (%s, pid %s) %s", node.node_id, node.hostname, node.pid, why)
        for w in self.registry.remove_node(node.node_id):
            self._rank_lost(
                w,
                f"was lost with its node (node agent {node.node_id} on {node.hostname}: {why})",
                node_id=node.node_id,
                why=why,
            )
        self.schedule()

    def watch_nodes(self, now: float) -> None:
        """Without these checks a dead node agent's ranks (its zygote kills them) would
        never be reported, and their runs and clients would wait forever."""
        how = self.local_node.exited() if self.local_node is not None else None
        if how is not None:
            if LOCAL_NODE_ID in self.registry.nodes:
                self._lose_node(self.registry.nodes[LOCAL_NODE_ID], how)
            if not self._stop:
                self.local_node.restart_after(how)
                self.fail_waiting_runs()  # given up, with no node left: say so, never wait
        # Silences are seconds long: walking every node on every tick (up to 200 a second while
        # heartbeats arrive, and they arrive more often the more nodes there are) cost the head
        # in proportion to nodes squared; a walk every NODE_SCAN_S costs it in proportion to nodes.
        if now < self.__dict__.get("_next_node_scan", 0.0):
            return
        self._next_node_scan = now + NODE_SCAN_S
        for node, why in self._node_exits().exited(list(self.registry.nodes.values())):
            self._lose_node(node, why)  # on this machine, its agent's exit is seen: no need to wait
        remote = [n for n in self.registry.nodes.values() if n.node_id != LOCAL_NODE_ID]
        for node, why in self.disconnects.lost(remote, now):
            self._lose_node(node, why)  # its connection closed and it stayed silent
        remote_timeout = remote_node_timeout_s()
        for node, why in list(silent_hosts(self.registry, remote, now, remote_timeout)):
            self._lose_node(node, why)  # its agent and all its workers silent together
        for node in list(self.registry.nodes.values()):
            if node.node_id == LOCAL_NODE_ID and self.local_node is not None:
                if now - node.last_seen > NODE_TIMEOUT_S and self.local_node.proc:
                    self.local_node.kill()  # hung: the check above restarts it next tick
                    node.last_seen = now
            elif now - node.last_seen > remote_timeout * node.beat_s:
                # as many missed heartbeats for a node asked to send fewer (node_pace.py)
                self._lose_node(
                    node,
                    f"lost: no heartbeat for {remote_timeout * node.beat_s:.0f}s (its host died, "
                    "or the network to it is down)",
                )
            else:
                self.pace.check(node, now)

    def _node_exits(self) -> NodeExits:
        """The node agents on this machine whose exit the head watches (made at first use)."""
        if "_node_exits_watch" not in self.__dict__:
            self._node_exits_watch = NodeExits()
        return self._node_exits_watch

    @staticmethod
    def node_suspect(node: NodeInfo, since: float | None = None) -> bool:
        """A remote node that missed its last heartbeats (``SUSPECT_S``), or was not heard
        from since ``since`` (monotonic s; when its ranks were asked to stop: a heartbeat a
        moment before its host went makes it look alive for SUSPECT_S, longer than the
        cancel grace): maybe lost. Both scaled by the node's heartbeat interval (``node_pace``)."""
        silent = time.monotonic() - node.last_seen
        return silent > SUSPECT_S * node.beat_s or node.last_seen < (since or 0.0)

    # -- refusing a peer ----------------------------------------------------------
    def refuse_peer(self, identity: bytes) -> None:
        """Tell a node agent or client whose message was rejected why (an unsigned notice
        with no data of the cluster, at most once every 2 s per peer): its key or its
        protocol version is wrong. The peer shows it, never unpickles it."""
        if not identity.startswith((b"node:", b"client:")):
            return
        latest = self.session.rejects.latest
        why = str(latest[1]) if latest and latest[0] == identity[:64] else "rejected"
        now = time.monotonic()
        told = self.__dict__.setdefault("_refused_at", {})
        if now - told.get(identity, -1e9) < 2.0:
            return
        if len(told) > 1024:
            told.clear()
        told[identity] = now
        if "signature" in why and identity.startswith(b"client:"):
            text = (
                "the head refused this key: wrong cluster key (its HMAC signature did not "
                "verify); use this head's connection file (key_file=..., `--key-file`) or its key"
            )
        elif "signature" in why:
            text = (
                "the head refused this peer: wrong cluster key (its HMAC signature did not verify); "
                "use the key file of this head (`--key-file`)"
            )
        elif "protocol version" in why:
            text = f"the head refused this peer: {why}"
        else:
            return  # a replay or a malformed message: dropped and counted, nothing to say
        self.refusal_log.refused(identity, text, now)
        try:
            self.sock.send_multipart([identity, REFUSED, text.encode()])
        except Exception:  # noqa: BLE001 - best effort
            pass


class RefusalLog:
    """``head.log``'s lines for refused peers: one every ``REFUSALS_LOGGED_EVERY_S`` in all (a
    peer that takes a new routing id per connection wrote 80 lines a second). The refusals
    in between are counted: into the next such line, or, when none comes, into a summary
    that the head's tick writes once the interval is over (``flush``)."""

    def __init__(self):
        self._logged_at = -1e9
        self._unlogged = 0
        self._last: tuple[bytes, str] | None = None  # the latest unlogged peer and why

    def refused(self, identity: bytes, text: str, now: float) -> None:
        if now - self._logged_at < REFUSALS_LOGGED_EVERY_S:
            self._unlogged += 1
            self._last = (identity[:64], text)
            return
        more = f" ({self._unlogged} more peers refused since the last such line)" if self._unlogged else ""
        log.warning("refused %r: %s%s", identity[:64], text, more)
        self._logged_at, self._unlogged, self._last = now, 0, None

    def flush(self, now: float) -> None:
        """The count of refusals not yet logged, once the interval since the last line is over."""
        if self._unlogged and now - self._logged_at >= REFUSALS_LOGGED_EVERY_S:
            identity, text = self._last
            log.warning(
                "refused %d more peers since the last such line, the latest %r: %s",
                self._unlogged,
                identity,
                text,
            )
            self._logged_at, self._unlogged, self._last = now, 0, None
