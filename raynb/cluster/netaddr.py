"""This machine's addresses: which interface the head may listen on, which IP a node
registers, and the text that names them when a given one is wrong."""

from __future__ import annotations

import ipaddress

import psutil

WILDCARDS = ("0.0.0.0", "::", "*")


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_of(address: str) -> str:
    """``198.18.0.1`` of ``tcp://198.18.0.1:5555``."""
    return address.split("//", 1)[-1].rsplit(":", 1)[0].strip("[]")


def local_addresses() -> dict[str, list[str]]:
    """Interface name -> its IPv4/IPv6 addresses (``psutil.net_if_addrs``)."""
    out: dict[str, list[str]] = {}
    for name, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            if a.family.name in ("AF_INET", "AF_INET6"):
                out.setdefault(name, []).append(a.address.split("%")[0])
    return out


def interfaces_text() -> str:
    """'lo 127.0.0.1, eth0 198.18.0.1' for the messages below."""
    return ", ".join(
        f"{name} {' '.join(a for a in addrs if ':' not in a) or addrs[0]}"
        for name, addrs in local_addresses().items()
    )


def check_host(host: str, option: str = "--host") -> None:
    """Refuse an address this machine does not have (a wildcard is allowed: asked for).

    Raises:
        ValueError: naming the address and the interfaces this machine has.
    """
    if host in WILDCARDS or is_loopback(host):
        return
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        raise ValueError(
            f"{option} {host!r} is not an IP address; give one of this machine's: {interfaces_text()}"
        ) from None
    if not any(host.strip("[]") in addrs for addrs in local_addresses().values()):
        raise ValueError(
            f"{option} {host} is not an address of this machine; its interfaces are: {interfaces_text()}"
        )
