"""Where the dashboard is: ``%ray_cluster dashboard``.

The kernel's own Jupyter server is the one whose pid jupyter_client put in the
kernel's ``JPY_PARENT_PID``; the server's info file (``jupyter server list``) has its
URL. The link is printed without the server's token, so a saved notebook does not
carry it: the browser that runs the notebook is logged in already.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

ENABLE = (
    "enable it with `jupyter server extension enable raynb` and restart Jupyter "
    "(installing raynb with pip enables it)"
)


def _servers() -> list[dict]:
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return []
    try:
        return list(list_running_servers())
    except OSError:
        return []


def _probe(info: dict, timeout: float = 2.0) -> int | None:
    """The HTTP status of the server's ``raynb/api/status`` (404: no dashboard), None if
    it did not answer."""
    req = urllib.request.Request(info["url"] + "raynb/api/status")
    if info.get("token"):
        req.add_header("Authorization", f"token {info['token']}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (OSError, ValueError):
        return None


def _describe(info: dict) -> str:
    url = info["url"].rstrip("/") + "/raynb/"
    status = _probe(info)
    if status == 404:
        return f"{info['url']} has no raynb dashboard: {ENABLE}"
    if status == 503:
        return f"{url}  (no raynb cluster is running yet: `%ray_cluster start`)"
    return url


def dashboard_message(servers: list[dict] | None = None, parent_pid: str | None = None) -> str:
    """The dashboard's URL for this kernel's Jupyter server, or what to do.

    Args:
        servers: running servers' info (``list_running_servers()`` when None).
        parent_pid: the kernel's server pid (``$JPY_PARENT_PID`` when None).
    """
    servers = _servers() if servers is None else servers
    parent_pid = os.environ.get("JPY_PARENT_PID") if parent_pid is None else parent_pid
    mine = [s for s in servers if str(s.get("pid")) == str(parent_pid)]
    if mine:
        return f"raynb dashboard: {_describe(mine[0])}"
    if not servers:
        return (
            "no running Jupyter server found on this machine: start one (`jupyter lab` or "
            "`jupyter server`) in the environment raynb is installed in and open <its URL>raynb/; " + ENABLE
        )
    lines = [
        "this kernel's Jupyter server is not known; running servers' dashboards "
        "(`jupyter server list` has their tokens):"
    ]
    lines += [f"  {_describe(s)}" for s in servers]
    return "\n".join(lines)


__all__ = ["dashboard_message"]
