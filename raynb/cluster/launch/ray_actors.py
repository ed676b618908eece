"""The Ray actors of a raynb cluster on Ray: the head's and one node agent's per Ray node.

Imported only where Ray is (``ray_engine`` imports it after checking Ray's version), and
run inside Ray's worker processes:

- ``HeadActor`` (named ``raynb-head`` in namespace ``raynb``, detached, pinned to the Ray
  head node, no CPU): starts raynb's head (``python -m raynb.cluster.head
  --workers 0``: no node agent of its own) as its child, listening on the Ray node's IP
  (off loopback: CurveZMQ, its client keys passed on to the agents); places one
  ``NodeAgentActor`` per Ray node and, from a watcher thread polling ``ray.nodes()``
  every ``WATCH_S``, one on each node that joins later; tells the head (``node_lost``)
  when a Ray node dies or its agent actor does, so those ranks fail their runs at once
  and ``FailureConfig`` restarts them on the other nodes.
- ``NodeAgentActor`` (named ``raynb-node-<Ray node id>``, detached, pinned with
  ``NodeAffinitySchedulingStrategy(node_id, soft=False)`` as Ray Serve pins its per-node
  proxies): holds the CPUs and GPUs its workers get (``num_cpus``, ``num_gpus``), so
  other Ray work waits for them, and runs raynb's node agent (``python -m
  raynb.cluster.node.agent``) as its child with ``CUDA_VISIBLE_DEVICES`` set to the GPUs Ray
  gave the actor (``ray.get_gpu_ids()``). The node agent keeps its zygote and forks warm
  workers as everywhere; the forked workers never call Ray.

Both actors are created with ``ACTOR_RUNTIME_ENV``: Ray starts its worker processes at
niceness 15 (``RAY_worker_niceness``), and the head, the agents, their zygotes and the
training ranks they fork would inherit it. Beside any nice-0 work on the node they got a
few percent of a core (beside three CPU-bound processes on 2 cores, the zygotes had not
finished their imports after 3 minutes). Ray's job supervisor asks for niceness 0 the
same way (``dashboard/modules/job/job_manager.py``).

Each child is started with ``PR_SET_PDEATHSIG`` (SIGTERM): when Ray kills an actor
(``ray.kill``, its node dying, ``raynb stop``), its node agent ends its workers' process
groups and its zygote; the zygote and each worker also die with their parent, so a
SIGKILLed agent leaves nothing either.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ...errors import ClusterError
from ..connection_file import open_private, private_dir, read_connection_file
from ..procutil import HEAD_MODULE, NODE_MODULE, die_with_parent, python_env
from ..protocol import curve_auth as curve
from ..protocol import messages
from ..protocol.control import Client

log = logging.getLogger("raynb.ray")

NAMESPACE = "raynb"
HEAD_ACTOR = "raynb-head"
AGENT_PREFIX = "raynb-node-"
# The raylet reads RAY_worker_niceness from an actor's runtime env when it starts the
# actor's process (see the module docstring).
ACTOR_RUNTIME_ENV = {"env_vars": {"RAY_worker_niceness": "0"}}
WATCH_S = 0.5
# A Ray node whose agent died is given a new one at most this often (seconds).
REPLACE_AFTER_S = 2.0
AGENT_RESTARTS_PER_MIN = 3


def _start_child(cmd: list[str], env: dict, log_name: str) -> subprocess.Popen:
    """``cmd`` as a child that gets SIGTERM when this actor's process dies."""
    with os.fdopen(open_private(private_dir("logs") / log_name), "ab") as out:
        return subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: die_with_parent(signal.SIGTERM),
        )


def agent_name(ray_node_id: str) -> str:
    return AGENT_PREFIX + ray_node_id[:16]


@ray.remote(num_cpus=0, max_restarts=0)
class NodeAgentActor:
    """One raynb node agent on one Ray node. Args: cfg (dict): ``address``, ``key``,
    ``node_id`` (raynb's), ``ray_node_id``, ``workers``, ``max_workers``, ``cpus``,
    ``note``, ``env`` (``RAYNB_HOME`` and friends for the agent)."""

    def __init__(self, cfg: dict):
        os.environ.update(cfg["env"])
        self.gpu_ids = [str(int(g)) if float(g).is_integer() else str(g) for g in ray.get_gpu_ids()]
        env = python_env(
            {
                "RAYNB_KEY": cfg["key"],
                "CUDA_VISIBLE_DEVICES": ",".join(self.gpu_ids),
                **curve.to_env(cfg.get("curve")),
            }
        )
        cmd = [
            sys.executable,
            "-m",
            NODE_MODULE,
            "--address",
            cfg["address"],
            "--workers",
            str(cfg["workers"]),
            "--max-workers",
            str(cfg["max_workers"]),
            "--node-id",
            cfg["node_id"],
            "--die-with-parent",
            "--cpus",
            str(max(1, cfg["cpus"])),
            "--label",
            f"ray_node_id={cfg['ray_node_id']}",
        ]
        if self.gpu_ids:
            cmd += ["--label", f"ray_gpu_ids={','.join(self.gpu_ids)}"]
        if cfg.get("note"):
            cmd += ["--note", cfg["note"]]
        self.proc = _start_child(cmd, env, f"node-{cfg['node_id']}.log")

    def info(self) -> dict:
        return {
            "pid": self.proc.pid,
            "actor_pid": os.getpid(),
            "gpu_ids": self.gpu_ids,
            "hostname": socket.gethostname(),
            "on_ray_node": ray.get_runtime_context().get_node_id(),
        }

    def serve(self) -> int:
        """Returns when the node agent exits: its exit code."""
        return self.proc.wait()


def _free_resources() -> dict:
    """{Ray node id: {resource: amount free}} (Ray's own per-node view)."""
    from ray._private import state

    try:
        return state.available_resources_per_node()
    except Exception:  # noqa: BLE001 - an older or newer Ray: fall back to the totals
        return {}


@ray.remote(num_cpus=0, max_restarts=0)
class HeadActor:
    """The raynb head on the Ray head node, and the watcher that follows Ray's nodes.

    Args: cfg (dict): ``workers_per_node`` (int | None: each node's free CPUs),
    ``gpus_per_node`` (int | None: each node's free GPUs), ``max_workers_per_node``
    (int | None: the workers it was given), ``port`` (int, 0: any free), ``env``.
    """

    def __init__(self, cfg: dict):
        os.environ.update(cfg["env"])
        self.cfg = cfg
        self.agents: dict[str, dict] = {}  # Ray node id -> its agent
        self.lost: dict[str, list[float]] = {}  # Ray node id -> when its agents died
        self.events: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.info_: dict | None = None
        self.head: subprocess.Popen | None = None
        self.client: Client | None = None

    # -- starting ---------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> dict:
        """Start the head, place the agents of the nodes there are now, start watching.
        Returns the connection info (address, key, pids, ray, workers)."""
        if self.info_ is not None:
            return self.info()
        key, token = messages.new_key(), uuid.uuid4().hex
        host = ray.util.get_node_ip_address()
        cmd = [
            sys.executable,
            "-m",
            HEAD_MODULE,
            "--workers",
            "0",  # 0: no local node agent
            "--host",
            host,
            "--port",
            str(int(self.cfg.get("port") or 0)),
            "--token",
            token,
        ]
        self.head = _start_child(cmd, python_env({"RAYNB_KEY": key.decode()}), "head.log")
        deadline = time.monotonic() + timeout
        while True:
            info = read_connection_file()
            if info is not None and info.get("token") == token:
                break
            if self.head.poll() is not None or time.monotonic() > deadline:
                raise ClusterError(
                    f"the raynb head did not start on Ray node {host} (exit "
                    f"{self.head.poll()}); see {private_dir('logs') / 'head.log'}"
                )
            time.sleep(0.05)
        self.client = Client(info["address"], key, info)
        self.info_ = dict(
            info,
            hostname=socket.gethostname(),
            ray={
                "namespace": NAMESPACE,
                "node_id": ray.get_runtime_context().get_node_id(),
                "gcs_address": ray.get_runtime_context().gcs_address,
            },
        )
        with self._lock:
            self._watch_once()
        threading.Thread(target=self._watch, name="raynb-ray-watcher", daemon=True).start()
        return self.info()

    def info(self) -> dict:
        """The connection info, with ``workers`` (warm workers asked of all agents) and
        ``agents`` ({Ray node id: node id, workers, cpus, gpus, pid, note})."""
        with self._lock:
            agents = {
                nid: {k: v for k, v in a.items() if k not in ("handle", "serve_ref")}
                for nid, a in self.agents.items()
            }
        return dict(
            self.info_ or {},
            agents=agents,
            events=list(self.events[-50:]),
            workers=sum(a["workers"] for a in agents.values()),
        )

    # -- watching Ray's nodes -----------------------------------------------------
    def _watch(self) -> None:
        while not self._stop.wait(WATCH_S):
            try:
                with self._lock:
                    if not self._stop.is_set():
                        self._watch_once()
            except Exception:  # noqa: BLE001 - Ray hiccups (GCS restarting) must not end the watch
                log.exception("watching Ray's nodes failed once; trying again")

    def _watch_once(self) -> None:
        nodes = {n["NodeID"]: n for n in ray.nodes()}
        refs = {a["serve_ref"]: nid for nid, a in self.agents.items()}
        if refs:
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
            for ref in ready:
                nid = refs[ref]
                try:
                    why = f"its node agent exited with code {ray.get(ref)}"
                except ray.exceptions.RayError as e:
                    why = f"its Ray actor died ({type(e).__name__})"
                if not nodes.get(nid, {}).get("Alive"):
                    why = "Ray reports the Ray node dead"
                self._lost(nid, why)
        for nid in list(self.agents):
            if not nodes.get(nid, {}).get("Alive"):
                self._lost(nid, "Ray reports the Ray node dead")
        now = time.monotonic()
        placed = []
        for nid, node in nodes.items():
            res = node.get("Resources") or {}
            if not node.get("Alive") or nid in self.agents or not (res.get("CPU") or res.get("GPU")):
                continue
            deaths = [t for t in self.lost.get(nid, []) if now - t < 60]
            if deaths and (now - deaths[-1] < REPLACE_AFTER_S or len(deaths) >= AGENT_RESTARTS_PER_MIN):
                continue
            placed.append(self._place(nid, node))
        for nid, handle, meta in placed:  # started side by side, waited for together
            try:
                info = ray.get(handle.info.remote(), timeout=60)
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as e:
                ray.kill(handle, no_restart=True)
                self.lost.setdefault(nid, []).append(time.monotonic())
                self.events.append(f"Ray node {nid[:8]}: its node agent did not start: {e}")
                continue
            self.agents[nid] = {"handle": handle, "serve_ref": handle.serve.remote(), **meta, **info}
            self.events.append(
                f"{time.strftime('%H:%M:%S')} Ray node {nid[:8]}: node agent "
                f"{meta['node_id']} with {meta['workers']} workers, {meta['gpus']} GPUs"
            )

    def _lost(self, nid: str, why: str) -> None:
        agent = self.agents.pop(nid)
        self.lost.setdefault(nid, []).append(time.monotonic())
        self.events.append(f"{time.strftime('%H:%M:%S')} Ray node {nid[:8]}: {why}")
        log.warning("raynb node %s on Ray node %s lost: %s", agent["node_id"], nid, why)
        try:
            self.client.request(
                messages.NODE_LOST,
                {"node_id": agent["node_id"], "reason": f"on Ray node {nid}: {why}"},
                reply_types=(messages.NODE_LOST_REPLY,),
                timeout=5.0,
            )
        except ClusterError as e:
            log.warning("could not tell the head: %s", e)
        try:
            ray.kill(agent["handle"], no_restart=True)
        except Exception:  # noqa: BLE001 - it is gone already
            pass

    def _place(self, nid: str, node: dict) -> tuple:
        """Create a node agent actor on Ray node ``nid``, taking the CPUs and GPUs that are
        free there, up to what was asked; what it could not take goes into its note.
        Returns (nid, its handle, what the head's info says of it)."""
        total, free = node.get("Resources") or {}, _free_resources().get(nid)
        free = total if free is None else free
        want_cpu = self.cfg.get("workers_per_node") or int(total.get("CPU", 0))
        want_gpu = self.cfg.get("gpus_per_node")
        want_gpu = int(total.get("GPU", 0)) if want_gpu is None else want_gpu
        cpus = min(want_cpu, int(math.floor(free.get("CPU", 0) + 1e-9)))
        gpus = min(want_gpu, int(math.floor(free.get("GPU", 0) + 1e-9)))
        note = None
        if cpus < want_cpu or gpus < want_gpu:
            note = (
                f"asked for {want_cpu} CPUs and {want_gpu} GPUs of Ray node {nid[:8]}; Ray had "
                f"{free.get('CPU', 0):g} CPUs and {free.get('GPU', 0):g} GPUs free: "
                f"{cpus} workers, {gpus} GPUs"
            )
        node_id = f"ray-{nid[:8]}"
        cfg = {
            "address": self.info_["address"],
            "key": self.info_["key"],
            "node_id": node_id,
            "curve": self.info_.get("curve"),
            "ray_node_id": nid,
            "workers": cpus,
            "cpus": cpus,
            "note": note,
            "env": self.cfg["env"],
            "max_workers": self.cfg.get("max_workers_per_node") or cpus,
        }
        name = agent_name(nid)
        try:
            ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)  # a stale one
        except ValueError:
            pass
        handle = NodeAgentActor.options(
            name=name,
            namespace=NAMESPACE,
            lifetime="detached",
            num_cpus=cpus,
            num_gpus=gpus,
            runtime_env=ACTOR_RUNTIME_ENV,
            scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False),
        ).remote(cfg)
        return nid, handle, {"node_id": node_id, "workers": cpus, "cpus": cpus, "gpus": gpus, "note": note}

    # -- stopping ---------------------------------------------------------------
    def shutdown(self, timeout: float = 20.0) -> dict:
        """Stop watching, stop the head (its runs end, its agents exit), kill the agent
        actors (Ray gets their CPUs and GPUs back). Returns the pids it ended."""
        self._stop.set()
        with self._lock:
            pids = [a["pid"] for a in self.agents.values()] + ([self.head.pid] if self.head else [])
            if self.client is not None:
                try:
                    self.client.request(messages.SHUTDOWN, reply_types=(messages.STATUS_REPLY,), timeout=5.0)
                except ClusterError:
                    pass
                self.client.close()
                self.client = None
            refs = [a["serve_ref"] for a in self.agents.values()]
            ray.wait(refs, num_returns=len(refs), timeout=timeout / 2)
            for a in self.agents.values():
                ray.kill(a["handle"], no_restart=True)
            self.agents.clear()
            if self.head is not None:
                try:
                    self.head.wait(timeout=timeout / 2)
                except subprocess.TimeoutExpired:
                    self.head.kill()
                    self.head.wait()
        return {"pids": pids}
