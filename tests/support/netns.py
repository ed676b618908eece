"""Hosts on one machine: Linux network namespaces joined by veth pairs to a bridge.

``Net(["head", "h1", "h2", "client"])`` makes one namespace per host (``rnb<pid>-<name>``),
a bridge in a namespace of its own (``rnb<pid>-br``), and gives host i the address
198.18.0.(i+1)/24 (RFC 2544 benchmarking space) on its ``eth0``; ``lo`` is up in each.
``close()`` kills every process in each namespace (``ip netns pids``), then deletes the
namespaces, which takes their veth ends with them. Names carry this process's pid (and an
optional ``tag``), so helpers running in parallel, and two test modules in one process,
never collide.

Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN): :func:`available` says why not otherwise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

SUBNET = "198.18.0"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def available() -> str | None:
    """None when namespaces can be made here, else the reason to skip."""
    if os.geteuid() != 0:
        return "network namespaces need root (`ip netns add`); run the multi-host tests as root"
    probe = f"rnb{os.getpid()}-probe"
    try:
        r = _ip("netns", "add", probe, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"`ip netns add` cannot run here: {e}"
    if r.returncode != 0:
        return f"`ip netns add` failed here: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


class Net:
    """Args:
    hosts: host names, in address order (the first gets 198.18.0.1).
    """

    def __init__(self, hosts: list[str], tag: str = ""):
        self.tag = f"rnb{os.getpid()}{tag}"  # ``tag``: a second Net in this process (a letter or two)
        self.ips = {h: f"{SUBNET}.{i + 1}" for i, h in enumerate(hosts)}
        self.ns = {h: f"{self.tag}-{h}" for h in hosts}
        self.bridge_ns = f"{self.tag}-br"
        self._made: list[str] = []
        try:
            self._add_ns(self.bridge_ns)
            _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
            for i, h in enumerate(hosts):
                self._add_host(h, i)
        except BaseException:
            self.close()
            raise

    def _add_ns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _add_host(self, host: str, i: int) -> None:
        ns, a, b = self.ns[host], f"{self.tag}v{i}a"[-15:], f"{self.tag}v{i}b"[-15:]
        self._add_ns(ns)
        _ip("link", "add", a, "type", "veth", "peer", "name", b)
        _ip("link", "set", a, "netns", ns)
        _ip("link", "set", b, "netns", self.bridge_ns)
        _ip("-n", ns, "link", "set", a, "name", "eth0")
        _ip("-n", ns, "addr", "add", f"{self.ips[host]}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", self.bridge_ns, "link", "set", b, "master", "br0")
        _ip("-n", self.bridge_ns, "link", "set", b, "up")

    # -- processes --------------------------------------------------------------
    def cmd(self, host: str, args: list[str]) -> list[str]:
        """``args`` run inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.ns[host], *args]

    def popen(self, host: str, args: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.cmd(host, args), **kw)

    def run(self, host: str, args: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.cmd(host, args), capture_output=True, text=True, timeout=timeout, **kw)

    def pids(self, host: str) -> list[int]:
        """Every process in ``host``'s namespace."""
        r = _ip("netns", "pids", self.ns[host], check=False)
        return [int(p) for p in r.stdout.split()]

    def kill_all(self, host: str) -> list[int]:
        """SIGKILL every process in ``host``'s namespace at once (a host that dies)."""
        pids = self.pids(host)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def wait_empty(self, host: str, timeout: float = 15) -> list[int]:
        """Wait until no process is left in ``host``'s namespace; returns those left."""
        deadline = time.monotonic() + timeout
        while self.pids(host) and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.pids(host)

    # -- the network ------------------------------------------------------------
    def link(self, host: str, up: bool) -> None:
        """Take ``host``'s interface down (a laptop that sleeps) or up again."""
        _ip("-n", self.ns[host], "link", "set", "eth0", "up" if up else "down")

    def close(self) -> None:
        """Kill every process in each namespace, then delete the namespaces and links."""
        for ns in self._made:
            r = _ip("netns", "pids", ns, check=False)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        deadline = time.monotonic() + 10
        for ns in self._made:
            while _ip("netns", "pids", ns, check=False).stdout.split() and time.monotonic() < deadline:
                time.sleep(0.05)
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made = []
