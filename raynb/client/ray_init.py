"""``raynb.init`` / ``shutdown`` / ``is_initialized``: Ray's process-level entry points,
on :func:`raynb.connect` (``ray.init``'s arguments, with Ray's meanings where raynb has them).
"""

from __future__ import annotations

from . import runtime_env as _runtime_env
from .connection import connect, disconnect, get_client
from .no_effect import accepted_no_effect

_initialized = False

# ray.init arguments that have no effect here, and why.
_NO_EFFECT = {
    "num_gpus": "each node agent finds its own GPUs",
    "object_store_memory": "raynb's shared data sits in /dev/shm, sized by what is shipped",
    "include_dashboard": "raynb's dashboard is the Jupyter server extension (docs)",
    "dashboard_host": "raynb's dashboard is the Jupyter server extension (docs)",
    "dashboard_port": "raynb's dashboard is the Jupyter server extension (docs)",
    "namespace": "a raynb cluster has one namespace",
    "logging_level": "raynb's own notices go to stderr",
    "logging_format": "raynb's own notices go to stderr",
    "configure_logging": "raynb leaves Python's logging configuration to the script",
    "log_to_driver": "each run relays its ranks' output while it runs; RunConfig(verbose=0) hides it",
    "resources": "raynb places ranks on warm workers, one per rank",
    "labels": "raynb places ranks on warm workers, one per rank",
    "_temp_dir": "raynb keeps its files under $RAYNB_HOME",
    "_system_config": "raynb keeps its own settings in $RAYNB_* variables",
}
_NOT_SERVED = {
    "local_mode": "raynb always runs ranks in worker processes; debug the function by calling it directly",
    "_node_ip_address": "start the node with `raynb node` on that machine",
    "_redis_password": "a raynb cluster's key is in its connection file",
}


def _check_ray_args(ray_args: dict) -> None:
    """``ray.init``'s other arguments: those not served raise ValueError, those with no
    effect here say so in a line, and any other name raises TypeError."""
    for key, value in ray_args.items():
        if key in _NOT_SERVED:
            if value:
                raise ValueError(f"raynb.init({key}=...) is not served: {_NOT_SERVED[key]}")
        elif key in _NO_EFFECT:
            if value not in (None, True) or key not in ("configure_logging", "log_to_driver"):
                accepted_no_effect(f"raynb.init({key}=...)", _NO_EFFECT[key])
        else:
            raise TypeError(
                f"raynb.init() got an unexpected keyword argument {key!r}: it is not one of "
                "ray.init's; see docs/coming-from-ray.md for the arguments raynb takes"
            )


def init(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    ignore_reinit_error: bool = False,
    runtime_env: dict | None = None,
    **ray_args,
):
    """Start or join a raynb cluster, as ``ray.init`` does a Ray cluster.

    Args:
        address (str | None): None, ``"auto"`` or ``"local"``: the local cluster (started
            when none runs); ``tcp://host:port`` or a connection file: as :func:`raynb.connect`.
        num_cpus (int | None): warm workers of a local cluster this call starts (4 when None).
        ignore_reinit_error (bool): a second ``init`` returns quietly instead of raising.
        runtime_env (dict | None): ``env_vars`` (set on every rank while a run runs) and
            ``working_dir`` / ``py_modules`` (local directories: the ranks' working directory
            and import path).
        **ray_args: ``ray.init``'s other arguments: those with no effect here
            (``configure_logging``, ``log_to_driver``, ``num_gpus``, ``namespace``, ...) are
            accepted with one line saying so.

    Returns:
        The process's client (``raynb.connect``'s).

    Raises:
        RuntimeError: called twice without ``ignore_reinit_error`` (as Ray).
        TypeError: an argument ``ray.init`` does not take (named).
        ValueError: a Ray argument raynb cannot honour (``local_mode``, ``runtime_env["pip"]``,
            an unknown address: named, with what to use).
        ClusterError: the cluster cannot be started or reached.
    """
    global _initialized
    if _initialized and get_client(connect_if_needed=False) is not None:
        if ignore_reinit_error:
            return get_client(connect_if_needed=False)
        raise RuntimeError(
            "raynb.init() was already called in this process; call raynb.shutdown() first, "
            "or pass ignore_reinit_error=True"
        )
    _check_ray_args(ray_args)
    if num_cpus is not None and (not isinstance(num_cpus, int) or isinstance(num_cpus, bool) or num_cpus < 1):
        raise ValueError(
            f"raynb.init(num_cpus={num_cpus!r}): give the number of warm workers, an integer >= 1"
        )
    _runtime_env.set_runtime_env(runtime_env)
    if address in (None, "auto", "local"):
        client = connect(num_workers=num_cpus or 4)
    elif address.startswith("ray://"):
        raise ValueError(
            f"raynb.init(address={address!r}): Ray Client addresses are not served; for raynb on "
            "a Ray cluster use raynb.connect(ray_address='HOST:PORT'), else a raynb tcp:// address"
        )
    else:
        client = connect(address)
    _initialized = True
    return client


def is_initialized() -> bool:
    """Whether :func:`init` (or ``raynb.connect``) connected this process."""
    return get_client(connect_if_needed=False) is not None


def shutdown() -> None:
    """Disconnect this process and forget its ``runtime_env`` (``ray.shutdown``). The warm
    cluster keeps running for the next script or notebook; ``raynb stop`` stops it."""
    global _initialized
    _initialized = False
    _runtime_env.set_runtime_env(None)
    disconnect()
