"""``ray.init`` / ``ray.shutdown`` / ``ray.is_initialized`` for a script served by raynb.

Each delegates to raynb's own (``raynb.init``, ``raynb.shutdown``, ``raynb.is_initialized``)
where raynb has it; else ``init`` attaches with :func:`raynb.connect`.
"""
from __future__ import annotations

import sys

from ..client import connection

# Ray's init arguments that only tune Ray's own processes (logging, dashboard, object store):
# accepted here, with nothing to do on raynb.
_NO_EFFECT = {"ignore_reinit_error", "configure_logging", "logging_level", "logging_format",
              "log_to_driver", "include_dashboard", "dashboard_host", "dashboard_port",
              "object_store_memory", "namespace", "local_mode", "num_gpus", "resources",
              "runtime_env", "_temp_dir", "_system_config", "_metrics_export_port"}


def init(address: str | None = None, *, num_cpus: int | None = None, **kwargs):
    """Start or join raynb's cluster, as ``ray.init`` does Ray's.

    Args:
        address (str | None): None, ``"auto"`` or ``"local"``: this machine's cluster (started
            with ``num_cpus`` warm workers, default 4, when none runs); else a raynb connection
            file or ``tcp://HOST:PORT``.
        num_cpus (int | None): warm workers for a cluster this call starts.

    Raises:
        TypeError: an argument Ray's ``init`` takes that raynb does not know.
        ClusterError: the cluster cannot be reached or started.
    """
    raynb = _raynb()
    if hasattr(raynb, "init"):
        return raynb.init(address, num_cpus=num_cpus, **kwargs)
    unknown = sorted(set(kwargs) - _NO_EFFECT)
    if unknown:
        raise TypeError(f"ray.init() got argument(s) raynb does not know: {', '.join(unknown)}; "
                        f"see docs/coming-from-ray.md")
    local = address in (None, "auto", "local")
    return connection.connect(None if local else address, num_workers=num_cpus or 4)


def shutdown() -> None:
    """Detach from raynb's cluster (the cluster stays warm; ``raynb run`` stops one it started)."""
    raynb = _raynb()
    if hasattr(raynb, "shutdown"):
        return raynb.shutdown()
    connection.disconnect()


def is_initialized() -> bool:
    """Whether this process is attached to a raynb cluster."""
    raynb = _raynb()
    if hasattr(raynb, "is_initialized"):
        return raynb.is_initialized()
    return connection.get_client(connect_if_needed=False) is not None


def _raynb():
    # The package's facade, looked up at call time: raynb.init & co. (where raynb has them)
    # are public names of raynb/__init__.py, which a layer does not import.
    return sys.modules["raynb"]
