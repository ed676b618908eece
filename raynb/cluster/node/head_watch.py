"""How a node agent tells a head that is gone from one that is slow.

A node agent that decides its head is gone ends every worker on its machine, and with
them every run there: it must not decide so because the head was busy. Three signs:

- **the head's process has exited** (the local node agent, which knows the head's pid:
  checked with its start time, so a reused pid is not taken for the head): gone at once;
- **the connection closed** (ZeroMQ's socket monitor: a head whose process ended has its
  TCP connections closed by the kernel) and did not come back within
  ``DISCONNECTED_S``: gone;
- **silence on an open connection**: a busy or stopped head (its loop held, its process
  SIGSTOPped or starved by a loaded machine). It is waited for ``RAYNB_HEAD_GRACE_S``
  (``head_grace_s``, 60 s by default) and, where the head's process is known to be
  alive, for as long as it lives: the workers are never ended under a living head.
"""
from __future__ import annotations

import logging

import psutil
import zmq
from zmq.utils.monitor import recv_monitor_message

from .. import settings

log = logging.getLogger("raynb.node")

# A connection to the head closed this long (s) without coming back: the head is gone.
DISCONNECTED_S = 4.0
# The default of RAYNB_HEAD_GRACE_S: how long a head silent on an open connection is
# waited for (s), long enough for a loaded machine.
HEAD_GRACE_S = 60.0


def head_grace_s() -> float:
    """``$RAYNB_HEAD_GRACE_S`` (s, at least 1), else ``HEAD_GRACE_S``."""
    return max(1.0, settings.get("RAYNB_HEAD_GRACE_S"))


class HeadWatch:
    """Args:
        head_pid (int | None): the head's pid where it runs on this machine (the local node
            agent), else None.
        grace_s (float | None): how long a silent head on an open connection is waited for
            (None: ``head_grace_s()``).
    """

    def __init__(self, head_pid: int | None = None, grace_s: float | None = None):
        self.grace_s = head_grace_s() if grace_s is None else grace_s
        self.head, self.head_pid_gone = None, None
        if head_pid:
            try:
                self.head = psutil.Process(head_pid)
            except psutil.Error:
                self.head = None   # already gone: the first check says so
                self.head_pid_gone = head_pid
        self.monitor: zmq.Socket | None = None
        self._sock = None
        self.connected = False
        self.closed_since: float | None = None   # monotonic s; None while connected
        self.last_heard = 0.0
        self._waiting_noted = 0.0

    def watch(self, sock: zmq.Socket, poller: zmq.Poller, now: float) -> None:
        """Follow ``sock``'s connection (a fresh socket after losing the head)."""
        self._close_monitor(poller)
        self._sock = sock
        self.monitor = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        poller.register(self.monitor, zmq.POLLIN)
        self.connected, self.closed_since, self.last_heard = False, now, now

    def _close_monitor(self, poller: zmq.Poller) -> None:
        if self.monitor is None:
            return
        try:
            poller.unregister(self.monitor)
        except KeyError:
            pass
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError:
            pass   # its socket is closed already
        self.monitor.close(0)
        self.monitor = None

    def handle(self, sock, now: float) -> bool:
        """Read the monitor's events when ``sock`` is the monitor; False for another socket."""
        if sock is not self.monitor:
            return False
        while True:
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)["event"]
            except zmq.Again:
                return True
            if event == zmq.EVENT_CONNECTED:
                self.connected, self.closed_since = True, None
            elif event == zmq.EVENT_DISCONNECTED and self.connected:
                self.connected, self.closed_since = False, now

    def heard(self, now: float) -> None:
        """A verified message came from the head."""
        self.last_heard = now
        self.connected, self.closed_since = True, None
        self._waiting_noted = 0.0

    def _head_alive(self) -> bool | None:
        """Whether the head's process lives (None: not known here, a remote head)."""
        if self.head is None:
            return False if self.head_pid_gone else None
        try:
            return self.head.is_running() and self.head.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def gone(self, now: float) -> str | None:
        """Why the head is gone, or None while it may be alive (busy, stopped, slow)."""
        alive = self._head_alive()
        if alive is False:
            pid = self.head.pid if self.head is not None else self.head_pid_gone
            return f"the head's process (pid {pid}) has exited"
        if self.closed_since is not None and now - self.closed_since > DISCONNECTED_S:
            return (f"the connection to the head closed {now - self.closed_since:.0f}s ago and did "
                    "not come back (its process ended, or its host or the network went down)")
        silent = now - self.last_heard
        if silent <= self.grace_s:
            return None
        if alive:
            if now - self._waiting_noted > self.grace_s:
                self._waiting_noted = now
                log.warning("no word from the head for %.0fs, but its process (pid %d) is alive: a busy "
                            "or stopped head; this node keeps its workers and waits", silent, self.head.pid)
            return None
        return (f"no word from the head for {silent:.0f}s on an open connection (RAYNB_HEAD_GRACE_S="
                f"{self.grace_s:.0f}): its host is down or it is hung")

    def close(self, poller: zmq.Poller | None = None) -> None:
        self._close_monitor(poller or zmq.Poller())
