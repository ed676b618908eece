"""The notebook side: the connection to a head, submitting and following runs,
shipping code and values, listing runs, and the view interface displays implement.

Imports only ``raynb.cluster`` and ``raynb.errors`` (see CONTRIBUTING.md).
"""

from ..cluster.protocol.control import Client
from . import handlers as _handlers  # noqa: F401 - binds the client's handler table on every connection
from .connection import cluster_status, connect, disconnect, get_client

__all__ = ["Client", "connect", "disconnect", "get_client", "cluster_status"]
