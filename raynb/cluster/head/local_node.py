"""The node agent a local cluster's head starts on its own machine, and restarts
when it dies (at most ``LOCAL_NODE_RESTARTS_PER_MIN`` times a minute)."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from typing import Callable

from ..protocol import curve_auth as curve
from ..connection_file import open_private, private_dir
from ..procutil import NODE_MODULE, describe_exit, python_env

log = logging.getLogger("raynb.head")

LOCAL_NODE_ID = "local"
LOCAL_NODE_RESTARTS_PER_MIN = 3


class LocalNode:
    """Args:
        address: the head's address, for the agent to connect to.
        key: the cluster key (passed in the child's environment, never on its command line).
        on_start: called with the new agent's pid (the head records it in the connection file).
    """

    def __init__(self, address: str, key: bytes, num_workers: int, max_workers: int | None,
                 on_start: Callable[[int], None] = lambda pid: None, curve_keys: dict | None = None):
        self.address, self.key = address, key
        self.num_workers, self.max_workers = num_workers, max_workers
        self.on_start = on_start
        self.curve_keys = curve_keys  # the client keys, when the head listens off loopback
        self.proc: subprocess.Popen | None = None
        self._starts: list[float] = []
        self.exits = 0                 # how many times it exited while the head ran
        self.gave_up: str | None = None  # why it is not restarted any more (status, a run's error)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        cmd = [sys.executable, "-m", NODE_MODULE, "--address", self.address,
               "--workers", str(self.num_workers), "--node-id", LOCAL_NODE_ID, "--die-with-parent",
               "--head-pid", str(os.getpid())]
        if self.max_workers:
            cmd += ["--max-workers", str(self.max_workers)]
        with os.fdopen(open_private(private_dir("logs") / "node-local.log"), "ab") as log_file:
            self.proc = subprocess.Popen(
                cmd, env=python_env({"RAYNB_KEY": self.key.decode(), **curve.to_env(self.curve_keys)}),
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT)
        self._starts.append(time.monotonic())
        self.on_start(self.proc.pid)

    def exited(self) -> str | None:
        """How the agent exited, if it did since the last call (then it is forgotten)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        code = self.proc.returncode
        self.proc = None
        self.exits += 1
        return describe_exit(code, None) if code >= 0 else describe_exit(None, -code)

    def restart_after(self, how: str) -> None:
        """Start it again, unless it died too often in the last minute."""
        now = time.monotonic()
        restarts = [t for t in self._starts[1:] if now - t < 60]
        if len(restarts) < LOCAL_NODE_RESTARTS_PER_MIN:
            log.warning("the local node agent %s; restarting it", how)
            self.start()
        else:
            self.gave_up = (f"the local node agent keeps exiting ({self.exits} times; the last {how}), so "
                            f"the head stopped restarting it: see {private_dir('logs') / 'node-local.log'}; "
                            "`raynb stop` and start the cluster again once the cause is fixed")
            log.error("the local node agent %s again; not restarting it (see node-local.log)", how)

    def status(self) -> dict:
        """``raynb status``'s fields of the local node agent."""
        return {"pid": self.pid, "exits": self.exits, "gave_up": self.gave_up}

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()

    def wait(self, timeout: float = 5.0) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
