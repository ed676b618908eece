"""raynb on an existing Ray cluster: ``raynb start --ray``, ``raynb.connect(ray_address=...)``,
``raynb stop`` of such a cluster.

Ray finds the machines, knows their CPUs and GPUs, starts and watches processes and
reports node deaths; raynb keeps its warm workers. ``start_on_ray`` connects with
``ray.init(address=...)``, starts the detached, named actors of ``ray_actors`` (the head
on the Ray head node, one node agent per Ray node, pinned to it, holding the CPUs and
GPUs its workers get) and writes this machine's connection file, so ``raynb status``,
``TorchTrainer.fit()`` and the magics find the cluster as they find a local one. The
file's ``ray`` entry is what ``raynb stop`` follows back to Ray.

Nothing here, nor anywhere in raynb, imports Ray unless one of these functions is called
(``pip install "raynb[ray]"``).

Security: the cluster key travels in the actors' arguments, through Ray's GCS. Whoever
may submit work to the Ray cluster may run code on its machines anyway; the key adds
nothing to guard there, and raynb's messages stay signed with it.
"""

from __future__ import annotations

import os
import socket
import time
import uuid

from ...errors import ClusterError
from ..connection_file import (
    head_alive,
    raynb_home,
    read_connection_file,
    remove_connection_file,
    write_connection_file,
)

SUPPORTED_RAY = ((2, 60), (2, 61))  # >= the first, < the second: what the tests run against
RAY_REQUIREMENT = "ray[default,train,data]>=2.60,<2.61"
INSTALL_HINT = 'pip install "raynb[ray]"'
ENV_FORWARDED = ("RAYNB_STORAGE_PATH", "RAYNB_WORKER_IDLE_TIMEOUT_S", "RAYNB_PROGRESS")


def check_ray_version(version: str) -> None:
    """Raises ClusterError naming ``version`` and the supported range when outside it."""
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        raise ClusterError(
            f"cannot read Ray's version {version!r}; raynb supports {RAY_REQUIREMENT}: {INSTALL_HINT}"
        ) from None
    low, high = SUPPORTED_RAY
    if not low <= (major, minor) < high:
        raise ClusterError(
            f"Ray {version} is installed, but raynb supports Ray >={low[0]}.{low[1]},"
            f"<{high[0]}.{high[1]} ({RAY_REQUIREMENT}): {INSTALL_HINT}, or run a Ray "
            "cluster of that version"
        )


def import_ray():
    """The ``ray`` module, checked for the supported version.

    Raises:
        ClusterError: Ray is not installed (the message says to install ``raynb[ray]``),
            or its version is outside ``SUPPORTED_RAY``.
    """
    try:
        import ray
    except ImportError:
        raise ClusterError(
            f"--ray (and ray_address=) needs Ray, which is not installed: "
            f"{INSTALL_HINT} (installs {RAY_REQUIREMENT})"
        ) from None
    check_ray_version(ray.__version__)
    return ray


def _check_reachable(address: str) -> None:
    """A HOST:PORT nothing answers at fails in seconds here, not after Ray's long retries."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(
            f"--ray-address {address!r} is not 'auto' or HOST:PORT (e.g. "
            "10.0.0.1:6379, the address `ray start --head` printed)"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=3.0).close()
    except OSError as e:
        raise ClusterError(
            f"no Ray cluster at {address}: {e.strerror or e}. Start one there with "
            f"`ray start --head --port={port}`, or pass the address it printed "
            "(--ray-address auto finds one started on this machine)"
        ) from None


def init_ray(address: str | None):
    """``ray.init(address=...)`` unless this process is connected already.

    Returns:
        (ray, True when this call connected: the caller disconnects with ray.shutdown()).

    With Ray's token authentication, the token is passed as Ray's CLI passes it
    (``ray_auth``: ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``).

    Raises:
        ClusterError: no Ray, a wrong version, no Ray cluster at ``address``, or the
            cluster refused this machine's token (Ray's ``InvalidAuthToken`` named, and
            where the token goes).
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    from . import ray_auth

    address = address or "auto"
    ray_auth.enable_token_if_available()  # as `ray start` does; Ray's init does it only for "auto"
    if address != "auto" and not address.startswith("ray://"):
        _check_reachable(address)
        ray_auth.probe(address)  # a refused token in a second, not after ray.init's 20 s of retries
    try:
        ray.init(address=address, namespace="raynb", log_to_driver=False, logging_level="WARNING")
    except Exception as e:  # noqa: BLE001 - AuthenticationError is a RayError, ConnectionError wraps it
        refusal = ray_auth.auth_error(e)
        if refusal is not None:
            raise ray_auth.refused(address, refusal) from None
        if not isinstance(e, ConnectionError):
            raise
        raise ClusterError(
            f"no Ray cluster at {address}: {e} Start one with `ray start --head` "
            "(then --ray-address auto on that machine, or HOST:6379)"
        ) from None
    return ray, True


def _actors():
    from . import ray_actors

    return ray_actors


def _head_actor(ray):
    A = _actors()
    try:
        return ray.get_actor(A.HEAD_ACTOR, namespace=A.NAMESPACE)
    except ValueError:
        return None


def _count_or_none(name: str, value) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise ValueError(f"{name} must be a whole number >= 0 or None, got {value!r}")


def _check_start(workers_per_node, gpus_per_node, max_workers_per_node) -> None:
    """start_on_ray's checks before Ray is reached: the counts, Ray itself, and no local
    cluster in this RAYNB_HOME. Raises ValueError or ClusterError as start_on_ray says."""
    for name, value in (
        ("workers_per_node", workers_per_node),
        ("gpus_per_node", gpus_per_node),
        ("max_workers_per_node", max_workers_per_node),
    ):
        _count_or_none(name, value)
    if workers_per_node == 0:
        raise ValueError("workers_per_node must be at least 1 (None: every free CPU of each node)")
    import_ray()  # no Ray, or the wrong one: said first
    current = read_connection_file()
    if current is not None and not current.get("ray"):
        if head_alive(current):
            raise ClusterError(
                f"a local raynb cluster runs in RAYNB_HOME {raynb_home()}: `raynb stop` "
                "it first, or use another RAYNB_HOME for the Ray-backed one"
            )


def _new_head_actor(ray, workers_per_node, gpus_per_node, max_workers_per_node, port: int):
    """The detached head actor, on Ray's head node where there is one (not started yet)."""
    A = _actors()
    env = {k: os.environ[k] for k in ENV_FORWARDED if k in os.environ}
    env["RAYNB_HOME"] = str(raynb_home() / "ray")  # not this machine's local cluster's files
    head_node = next(
        (
            n["NodeID"]
            for n in ray.nodes()
            if n.get("Alive") and "node:__internal_head__" in (n.get("Resources") or {})
        ),
        None,
    )
    opts = {}
    if head_node is not None:
        opts["scheduling_strategy"] = A.NodeAffinitySchedulingStrategy(head_node, soft=False)
    return A.HeadActor.options(
        name=A.HEAD_ACTOR,
        namespace=A.NAMESPACE,
        lifetime="detached",
        runtime_env=A.ACTOR_RUNTIME_ENV,
        **opts,
    ).remote(
        {
            "workers_per_node": workers_per_node,
            "gpus_per_node": gpus_per_node,
            "port": port,
            "max_workers_per_node": max_workers_per_node,
            "env": env,
        }
    )


def start_on_ray(
    ray_address: str | None = "auto",
    workers_per_node: int | None = None,
    gpus_per_node: int | None = None,
    max_workers_per_node: int | None = None,
    port: int = 0,
    timeout: float = 180.0,
) -> tuple[dict, bool]:
    """Start raynb on the Ray cluster at ``ray_address``, or find it running there.

    Args:
        ray_address (str | None): ``"auto"`` (a Ray cluster on this machine), ``HOST:PORT``
            of its GCS, or ``ray://HOST:10001``.
        workers_per_node (int | None): warm workers (= CPUs reserved) per Ray node; None:
            every CPU Ray has free there. A node with fewer free takes what is free
            (``raynb status`` says so in its note).
        gpus_per_node (int | None): GPUs reserved per node; None: every free GPU.
        max_workers_per_node (int | None): the most workers a node may hold (None: the
            CPUs it reserved: raynb never runs more workers than Ray gave it).
        port (int): the head's port (0: a free one).
        timeout (float): seconds to wait for the head and the workers (seconds).

    Returns:
        (connection info, started): also written to this machine's connection file.

    Raises:
        ClusterError: no Ray / wrong version / no Ray cluster there; a local raynb cluster
            runs in this RAYNB_HOME; the head or the workers did not come up.
        ValueError: a count is not a whole number >= 0.
    """
    _check_start(workers_per_node, gpus_per_node, max_workers_per_node)
    ray, connected = init_ray(ray_address)
    try:
        head = _head_actor(ray)
        started = head is None
        if started:
            head = _new_head_actor(ray, workers_per_node, gpus_per_node, max_workers_per_node, port)
        try:
            info = ray.get(head.start.remote(), timeout=timeout)
        except Exception as e:  # noqa: BLE001 - RayActorError, GetTimeoutError, the head's ClusterError
            if started:
                ray.kill(head, no_restart=True)
            raise ClusterError(f"raynb did not start on the Ray cluster at {ray_address}: {e}") from None
        info["ray"]["address"] = (
            ray_address if ray_address not in (None, "auto") else info["ray"]["gcs_address"]
        )
        local = _local_info(info)
        write_connection_file(local)
        if started:
            _wait_for_workers(local, info["workers"], timeout)
        return local, started
    finally:
        if connected:
            ray.shutdown()


def _wait_for_workers(info: dict, num_workers: int, timeout: float) -> None:
    """Until the head counts ``num_workers`` workers (the agents' zygotes forked them)."""
    from ..protocol.control import Client

    c = Client(info["address"], info["key"].encode(), info)
    deadline = time.monotonic() + timeout
    try:
        while len(c.status(timeout=max(1.0, deadline - time.monotonic()))["workers"]) < num_workers:
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"only some of the {num_workers} workers on Ray became ready in "
                    f"{timeout:.0f}s; see the node-*.log files in {raynb_home() / 'ray' / 'logs'} "
                    "on each Ray node"
                )
            time.sleep(0.05)
    finally:
        c.close()


def _local_info(info: dict) -> dict:
    """What this machine's connection file holds of a Ray-backed cluster: the head's pid
    only when the head runs on this machine (it is checked as a local head's is)."""
    same_host = info.get("hostname") == socket.gethostname()
    return {
        "address": info["address"],
        "key": info["key"],
        "workers": info["workers"],
        "pids": {"head": info["pids"]["head"]} if same_host else {},
        "created": time.time(),
        "version": info.get("version"),
        "token": uuid.uuid4().hex,
        "ray": info["ray"],
        **({"curve": info["curve"]} if info.get("curve") else {}),
    }


def ray_info(ray_address: str | None = "auto") -> dict | None:
    """The connection info of raynb on the Ray cluster at ``ray_address`` (from its
    named head actor), or None when raynb does not run there."""
    ray, connected = init_ray(ray_address)
    try:
        head = _head_actor(ray)
        return None if head is None else ray.get(head.info.remote(), timeout=30)
    finally:
        if connected:
            ray.shutdown()


def stop_on_ray(info: dict | None = None, timeout: float = 60.0) -> bool:
    """Stop raynb on its Ray cluster: the head (its runs end), every node agent actor
    and its processes; Ray gets the CPUs and GPUs back. Ray's own processes and other
    actors are untouched. False when raynb did not run there.

    Args:
        info: this machine's connection info (its ``ray`` entry); None: ``"auto"``.
    """
    address = ((info or {}).get("ray") or {}).get("address") or "auto"
    ray, connected = init_ray(address)
    try:
        A = _actors()
        head = _head_actor(ray)
        if head is None:
            stopped = False
        else:
            try:
                ray.get(head.shutdown.remote(), timeout=timeout)
            except Exception:  # noqa: BLE001 - a dead or hung head actor: kill it all the same
                pass
            ray.kill(head, no_restart=True)
            stopped = True
        for name in _raynb_actor_names(ray, A):  # agents a dead head actor could not end
            try:
                ray.kill(ray.get_actor(name, namespace=A.NAMESPACE), no_restart=True)
            except ValueError:
                pass
        deadline = time.monotonic() + timeout
        while _raynb_actor_names(ray, A, include_head=True) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        if connected:
            ray.shutdown()
    current = read_connection_file()
    if current is not None and current.get("ray"):
        remove_connection_file()
    return stopped


def _raynb_actor_names(ray, A, include_head: bool = False) -> list[str]:
    names = [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a.get("namespace") == A.NAMESPACE
    ]
    return [n for n in names if n.startswith(A.AGENT_PREFIX) or (include_head and n == A.HEAD_ACTOR)]


__all__ = ["start_on_ray", "stop_on_ray", "ray_info", "import_ray", "check_ray_version", "init_ray"]
