"""A raynb cluster over three hosts (network namespaces, ``netns``) and a fourth for the
notebook: the head alone on 198.18.0.1 (``raynb start --host 198.18.0.1 --head-only``),
node agents ``n1`` and ``n2`` with 2 workers each on .2 and .3 (``raynb node --key-file``),
and a client namespace on .4. Each host has its own RAYNB_HOME; the connection file is
copied to each (0600), as one would with scp. Code "on the laptop" runs as a script in
the client namespace (:meth:`Cluster.client`), printing JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest

from . import netns

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ["head", "h1", "h2", "client"]

# A 4-rank SPREAD run over the hosts, checkpointing each epoch and resuming from the latest
# (FailureConfig(max_failures=3)), as the client's script (Cluster.client): the losing-a-host
# test and benchmarks/multihost.py. Set EPOCHS, EPOCH_S and NAME before it.
LONG_RUN = """
    import tempfile
    import torch
    import torch.distributed as dist
    from raynb import Checkpoint, FailureConfig, RunConfig, ScalingConfig, TorchTrainer
    from raynb.train import get_checkpoint, get_context, report

    def loop():
        ctx = get_context()
        ckpt = get_checkpoint()
        start = 0
        if ckpt is not None:
            with ckpt.as_directory() as d:
                start = torch.load(os.path.join(d, "state.pt"))["epoch"] + 1
        for epoch in range(start, EPOCHS):
            t = torch.ones(1)
            dist.all_reduce(t)
            time.sleep(EPOCH_S)
            with tempfile.TemporaryDirectory() as d:
                if ctx.get_world_rank() == 0:
                    torch.save({"epoch": epoch}, os.path.join(d, "state.pt"))
                report({"epoch": epoch, "start": start, "world": t.item(),
                        "host": os.environ.get("RAYNB_NODE_IP")},
                       checkpoint=Checkpoint.from_directory(d) if ctx.get_world_rank() == 0 else None)

    raynb.connect(KEY_FILE)
    r = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=4, placement_strategy="SPREAD"),
                     run_config=RunConfig(name=NAME, failure_config=FailureConfig(max_failures=3))).fit()
    print(json.dumps({"error": None if r.error is None else str(r.error), "path": r.path,
                      "checkpoint": r.checkpoint.path if r.checkpoint else None}))
"""


def bench_args(argv=None):
    """A multi-host benchmark's arguments (``--quick``), or None where network namespaces
    cannot be made here (after printing ``{"skipped": why}`` as its JSON)."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    why = netns.available()
    if why:
        print(json.dumps({"skipped": why}))
        return None
    return args


class Cluster:
    def __init__(self, net: netns.Net, base: Path):
        self.net, self.base = net, base
        self.homes = {h: base / f"home-{h}" for h in net.ips}  # HOSTS unless made with others
        for home in self.homes.values():
            home.mkdir(mode=0o700)
        self.storage = base / "storage"
        self.storage.mkdir(mode=0o700)
        self.nodes: dict[str, subprocess.Popen] = {}
        self.node_pids: list[int] = []  # every node agent started, restarted ones too
        self.start_out = ""

    def env(self, host: str, **extra) -> dict:
        return dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            RAYNB_HOME=str(self.homes[host]),
            RAYNB_STORAGE_PATH=str(self.storage),
            RAYNB_PROGRESS="text",
            RAYNB_KEEP_CLUSTER="1",
            **extra,
        )

    def key_file(self, host: str) -> Path:
        return self.homes[host] / "head.json"

    def start(self, port: int = 0) -> None:
        """``raynb start`` on the head's namespace with keys from ``raynb keygen`` (kept
        across a restart of the head)."""
        keys = self.homes["head"] / "keys"
        if not keys.exists():
            r = self.net.run(
                "head", [sys.executable, "-m", "raynb.cli", "keygen", str(keys)], env=self.env("head")
            )
            assert r.returncode == 0, r.stderr
        r = self.net.run(
            "head",
            [
                sys.executable,
                "-m",
                "raynb.cli",
                "start",
                "--host",
                self.net.ips["head"],
                "--port",
                str(port),
                "--head-only",
                "--key-file",
                str(keys / "head-keys.json"),
            ],
            env=self.env("head"),
        )
        assert r.returncode == 0, r.stdout + r.stderr
        self.start_out = r.stdout
        self.info = json.loads((self.homes["head"] / "cluster.json").read_text())
        for h in list(self.homes)[1:]:  # every host but the head (the first)
            shutil.copy(self.homes["head"] / "cluster.json", self.key_file(h))
            os.chmod(self.key_file(h), 0o600)

    def start_node(self, host: str, node_id: str, workers: int = 2, *extra: str) -> subprocess.Popen:
        log = open(self.base / f"node-{node_id}.log", "ab")
        p = self.net.popen(
            host,
            [
                sys.executable,
                "-m",
                "raynb.cli",
                "node",
                "--address",
                self.info["address"],
                "--key-file",
                str(self.key_file(host)),
                "--workers",
                str(workers),
                "--node-id",
                node_id,
                "--reconnect",
                "10",
                *extra,
            ],
            env=self.env(host),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.nodes[node_id] = p
        self.node_pids.append(p.pid)
        return p

    def remove_workers_tmp(self) -> None:
        """The workers' temp dirs of this cluster's node agents (``node_host``): an agent
        SIGKILLed with its host (the host-loss tests) cannot remove its own."""
        from raynb.cluster.node.host import WORKERS_TMP_PREFIX

        root = tempfile.gettempdir()
        for name in os.listdir(root):
            pid = name[len(WORKERS_TMP_PREFIX) :].partition("-")[0]
            if name.startswith(WORKERS_TMP_PREFIX) and pid.isdigit() and int(pid) in self.node_pids:
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)

    def node_log(self, node_id: str) -> str:
        return (self.base / f"node-{node_id}.log").read_text(errors="replace")

    def client_prelude(self, host: str = "client") -> str:
        return (
            f"import json, os, sys, time\nimport raynb\n"
            f"KEY_FILE = {str(self.key_file(host))!r}\nADDRESS = {self.info['address']!r}\n"
        )

    def client_args(self, code: str, host: str = "client", private_shm: bool = False) -> list[str]:
        """The command line :meth:`client` runs in ``host``'s namespace (for ``net.popen``);
        with ``private_shm`` the shell ``exec``s python, so the process is python's."""
        args = [sys.executable, "-c", self.client_prelude(host) + textwrap.dedent(code)]
        if private_shm:
            args = [
                "sh",
                "-c",
                'mount -t tmpfs -o size=256m,mode=1777 raynb-test /dev/shm && exec "$@"',
                "sh",
                *args,
            ]
        return args

    def client(
        self,
        code: str,
        timeout: float = 120,
        host: str = "client",
        check: bool = True,
        private_shm: bool = False,
    ):
        """Run ``code`` (after :meth:`client_prelude`: raynb, KEY_FILE, ADDRESS) in the client
        namespace; returns the JSON its last stdout line holds. ``private_shm``: the script
        gets a ``/dev/shm`` of its own (a tmpfs in the mount namespace ``ip netns exec``
        makes for it, gone when it exits), as a notebook on another machine has."""
        r = self.net.run(host, self.client_args(code, host, private_shm), env=self.env(host), timeout=timeout)
        if check:
            assert r.returncode == 0, f"client script failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        last = [line for line in r.stdout.splitlines() if line.startswith("{")]
        return (json.loads(last[-1]) if last else None), r

    def status(self) -> dict:
        st, _ = self.client("c = raynb.connect(KEY_FILE)\nprint(json.dumps(c.status()))")
        return st

    def wait_workers(self, n: int, timeout: float = 120, nodes: set | None = None) -> dict:
        code = f"""
            c = raynb.connect(KEY_FILE)
            deadline = time.monotonic() + {timeout}
            while True:
                st = c.status()
                idle = [w for w in st["workers"] if w["state"] == "idle"
                        and ({nodes!r} is None or w["node_id"] in {nodes!r})]
                if len(idle) >= {n} or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            print(json.dumps(st))
        """
        st, _ = self.client(code, timeout=timeout + 30)
        idle = [w for w in st["workers"] if w["state"] == "idle" and (nodes is None or w["node_id"] in nodes)]
        assert len(idle) >= n, f"only {len(idle)} idle workers of {n}: {st['workers']}"
        return st

    def stop(self) -> None:
        self.net.run("head", [sys.executable, "-m", "raynb.cli", "stop"], env=self.env("head"), timeout=60)


@contextmanager
def hosts_up(
    base: Path,
    nodes: tuple = (("h1", "n1", 2), ("h2", "n2", 2)),
    tag: str = "",
    remove_base: bool = False,
    hosts: list | None = None,
):
    """A running cluster: the head, a node agent per ``(host, node id, workers)`` in
    ``nodes``, and the client namespace, in namespaces named with ``tag``
    (``netns.Net``); torn down with every process in every namespace killed and the
    namespaces deleted (and ``base`` removed, with ``remove_base``). ``hosts``: the
    namespaces to make (default ``HOSTS``: head, h1, h2, client). For the tests and the
    benchmarks alike; the caller checks ``netns.available()`` first."""
    net = netns.Net(hosts or HOSTS, tag=tag)
    try:
        c = Cluster(net, base)
    except BaseException:  # (a base that cannot hold the homes): no namespace left behind
        net.close()
        raise
    try:
        c.start()
        for host, node_id, workers in nodes:
            c.start_node(host, node_id, workers)
        c.wait_workers(sum(workers for _, _, workers in nodes))
        yield c
    finally:
        try:
            c.stop()
        finally:
            net.close()
            c.remove_workers_tmp()
            if remove_base:
                shutil.rmtree(base, ignore_errors=True)


@contextmanager
def cluster_up(base: Path, tag: str = "", node_ids: tuple[str, str] = ("n1", "n2")):
    """:func:`hosts_up` with ``node_ids`` on h1 and h2, 2 workers each. Skips without root."""
    why = netns.available()
    if why:
        pytest.skip(why)
    with hosts_up(base, ((("h1", node_ids[0], 2)), ("h2", node_ids[1], 2)), tag) as c:
        yield c


@pytest.fixture(scope="module")
def three_hosts(tmp_path_factory):
    """:func:`cluster_up` with nodes n1 and n2 (module-scoped)."""
    with cluster_up(tmp_path_factory.mktemp("multihost")) as c:
        yield c
