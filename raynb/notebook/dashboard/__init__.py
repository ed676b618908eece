"""The cluster dashboard: a Jupyter server extension serving ``<base_url>raynb/``.

Nodes and workers with their CPU and memory, runs with their state, a run's live
metrics and plot, each rank's logs, a button to cancel a run, and the JSON API the
page polls (``handlers.py``). Jupyter authenticates every request (its token or
login cookie); the extension talks to the local cluster of the server's
``RAYNB_HOME`` over a connection of its own (``gateway.py``).

Installing raynb enables it (``etc/jupyter/jupyter_server_config.d/raynb.json``);
otherwise ``jupyter server extension enable raynb``, or for one server
``jupyter server --ServerApp.jpserver_extensions="{'raynb': True}"``. Restart the
server after enabling. ``%ray_cluster dashboard`` prints the link.
"""

from __future__ import annotations


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": "raynb.notebook.dashboard"}]


def _load_jupyter_server_extension(serverapp) -> None:
    """Add the dashboard's routes to the server (called by jupyter-server at start)."""
    from .gateway import ClusterGateway
    from .handlers import handlers

    web_app = serverapp.web_app
    base_url = web_app.settings.get("base_url", "/")
    web_app.add_handlers(".*$", handlers(base_url, ClusterGateway()))
    serverapp.log.info("raynb dashboard at %sraynb/", base_url)
