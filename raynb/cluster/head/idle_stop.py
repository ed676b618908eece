"""Stopping the cluster once no one else uses it: ``shutdown`` with ``when_idle``.

A plain script that started the local cluster stops it when it exits, as ``ray.init()``'s
local cluster ends with its driver. Another process may have attached to it meanwhile
(two scripts started at once share one cluster; a notebook attached to a script's
cluster): stopping at once would fail that process's active run with "the cluster was
stopped". So the exiting script asks for a stop *when idle*, naming the routing ids of
its own connections (``owners``), and the head stops once

- no run is active (queued or running) that a client other than the owners submitted
  or follows (the owners' own runs end with the cluster, as before),
- no job's driver runs (``raynb submit``: a client of the cluster too), and
- no other client has used it for ``CLIENT_GRACE_S`` (``$RAYNB_CLIENT_GRACE_S``; one that has just connected
  and is about to submit its first run): connecting (``connect()``'s hello), submitting,
  attaching, cancelling count as use; pings and asking for the status, the runs or their
  logs do not, so an open dashboard or a ``watch raynb status`` does not keep it up for good.

A client that stays quiet longer (a notebook between cells) finds the cluster gone and
its next run starts a fresh one, saying so; a cluster meant to outlive scripts is
``raynb start``'s. ``raynb start`` finding a script's cluster running keeps it (a
``hello`` with ``keep``): a stop asked when idle, pending or later, then leaves it up,
as a ``ray start`` cluster outlives its drivers; ``raynb stop`` still ends it.
"""

from __future__ import annotations

from .. import settings
from ..protocol import messages
from .run import TERMINAL

# What a client sends when it uses the cluster: ``connect()``'s hello, and what it asks of
# runs and jobs (a client following a run is counted by the run being active).
USE = frozenset(
    {messages.HELLO, messages.SUBMIT_RUN, messages.ATTACH_RUN, messages.CANCEL_RUN, messages.SUBMIT_JOB}
)

# A client submits right after it says hello; 10 s also covers a busy machine. The
# default of ``$RAYNB_CLIENT_GRACE_S``, which the head reads when it starts.
CLIENT_GRACE_S = 10.0


class IdleStop:
    """What the head's ``when_idle`` shutdown waits for. ``owners`` is None until one is asked."""

    def __init__(self):
        self.heard: dict[bytes, float] = {}  # client routing id -> when last heard (monotonic s)
        self.owners: set[bytes] | None = None
        self.kept = False  # `raynb start` attached: no stop when idle any more
        self.grace_s: float = settings.get("RAYNB_CLIENT_GRACE_S")

    def keep(self) -> None:
        """Keep the cluster up until a plain ``shutdown``: a stop when idle asked before
        is dropped, one asked later is refused."""
        self.kept, self.owners = True, None

    def client_heard(self, identity: bytes, now: float) -> None:
        self.heard[identity] = now

    def ask(self, owners) -> None:
        """A stop when idle is asked by the clients ``owners`` (routing ids, bytes); no-op
        once the cluster is kept."""
        if not self.kept:
            self.owners = set(owners) | (self.owners or set())

    def forget_quiet(self, now: float) -> None:
        """Forget the clients not heard from within the grace (called each tick)."""
        for identity, when in list(self.heard.items()):
            if now - when > self.grace_s:
                del self.heard[identity]

    def in_use(self, runs, jobs_running: int, now: float) -> str | None:
        """Why the cluster is still in use by others (for the log and the asker), or None
        when it may stop now."""
        if self.kept:
            return "`raynb start` keeps it (`raynb stop` ends it)"
        self.forget_quiet(now)
        owners = self.owners or set()
        theirs = [r for r in runs if r.state not in TERMINAL and not {r.client, *r.followers} <= owners]
        if theirs:
            return f"{len(theirs)} active run(s) of other clients ({', '.join(r.name for r in theirs[:3])})"
        if jobs_running:
            return f"{jobs_running} running job(s)"
        others = [i for i in self.heard if i not in owners]
        if others:
            return f"{len(others)} other client(s) connected in the last {self.grace_s:g}s"
        return None
