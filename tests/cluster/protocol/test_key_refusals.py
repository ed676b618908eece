"""Keys and node ids the head refuses, with real processes: a client with a wrong key is
told within 2 s that the head refused its key (on loopback: the head's unsigned refusal
notice; off loopback: the failed CurveZMQ handshake), never "the head does not answer";
a node agent with a wrong key exits with status 3 naming its key source and the
refusal; a second node agent under a live node's ``--node-id`` is refused (status 3,
naming the id and the host that holds it), the first keeps it, and ``raynb status``
counts the refusal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import private_cluster
from support.multihost_fixture import cluster_up

import raynb
from raynb.cluster.connection_file import write_connection_file
from raynb.cluster.protocol.control import KeyRefused


def _node(address, *args, env=None, timeout=60):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "raynb.cli",
            "node",
            "--address",
            address,
            "--workers",
            "0",
            "--reconnect",
            "5",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, **(env or {})),
    )


def test_a_wrong_key_on_loopback_is_named_at_once_and_a_node_id_is_never_shared(tmp_path, monkeypatch):
    with private_cluster(tmp_path, monkeypatch, workers=1) as (info, client, pids):
        address = info["address"]
        t0 = time.monotonic()
        with pytest.raises(KeyRefused, match="the head refused this key: wrong cluster key") as e:
            raynb.connect(address, key="f" * 64)
        assert time.monotonic() - t0 < 2.0
        assert "does not answer" not in str(e.value) and "key=... or $RAYNB_KEY" in str(e.value)
        # A node agent with a wrong key file: status 3, the file and the refusal named.
        wrong = tmp_path / "other-cluster.json"
        write_connection_file({**info, "key": "e" * 64}, wrong)
        r = _node(address, "--key-file", str(wrong))
        assert r.returncode == 3, r.stderr[-2000:]
        assert "wrong cluster key" in r.stderr and f"the key file {wrong}" in r.stderr, r.stderr[-2000:]
        # A second agent under the live local node's id: refused, the local node keeps it.
        before = raynb.cluster_status()
        local = next(n for n in before["nodes"])
        r = _node(address, "--key", info["key"], "--node-id", local["node_id"])
        assert r.returncode == 3, r.stderr[-2000:]
        assert (
            f"node id {local['node_id']!r} is held by a live node agent on {local['hostname']} "
            f"({local['ip']}, pid {local['pid']})"
        ) in r.stderr, r.stderr[-2000:]
        after = raynb.cluster_status()
        assert [(n["node_id"], n["pid"]) for n in after["nodes"]] == [(local["node_id"], local["pid"])]
        assert after["duplicate_nodes_refused"] == before.get("duplicate_nodes_refused", 0) + 1
        st = subprocess.run(
            [sys.executable, "-m", "raynb.cli", "status"], capture_output=True, text=True, timeout=60
        )
        assert "node agents refused for a node id already in use: 1" in st.stdout, st.stdout
        r = raynb.TorchTrainer(
            lambda: raynb.train.report({"ok": 1}),
            scaling_config=raynb.ScalingConfig(num_workers=1),
            run_config=raynb.RunConfig(verbose=0),
        ).fit()
        assert r.metrics["ok"] == 1  # the first node's workers still run


OTHER_KEYS_CLIENT = """
    from raynb.cluster.protocol.control import KeyRefused
    t0 = time.monotonic()
    try:
        raynb.connect(ADDRESS, key_file=OTHER)
        print(json.dumps({"outcome": "connected"}))
    except KeyRefused as e:
        print(json.dumps({"outcome": "refused", "message": str(e), "s": time.monotonic() - t0}))
"""


def test_another_heads_key_file_off_loopback_is_refused_naming_it(tmp_path):
    with cluster_up(tmp_path, tag="kr", node_ids=("n1", "n2")) as c:
        other = c.homes["client"] / "other-keys"
        r = c.net.run(
            "client", [sys.executable, "-m", "raynb.cli", "keygen", str(other)], env=c.env("client")
        )
        assert r.returncode == 0, r.stderr
        peers = other / "cluster-keys.json"
        out, r = c.client(f"OTHER = {str(peers)!r}\n" + textwrap.dedent(OTHER_KEYS_CLIENT), timeout=60)
        assert out["outcome"] == "refused", r.stdout + r.stderr
        assert out["s"] < 2.0, out
        assert "CurveZMQ handshake" in out["message"] and "does not answer" not in out["message"], out
        assert f"key_file={str(peers)!r}" in out["message"], out
        # A node agent with that key file: status 3, naming the file and the handshake.
        node = c.net.run(
            "h1",
            [
                sys.executable,
                "-m",
                "raynb.cli",
                "node",
                "--address",
                c.info["address"],
                "--key-file",
                str(peers),
                "--workers",
                "0",
                "--node-id",
                "n9",
                "--reconnect",
                "5",
            ],
            env=c.env("h1"),
            timeout=60,
        )
        assert node.returncode == 3, node.stderr[-2000:]
        assert "CurveZMQ handshake" in node.stderr and f"the key file {peers}" in node.stderr, node.stderr[
            -2000:
        ]
        # A second agent with the right keys under n1's id, from another host: refused.
        dup = c.net.run(
            "h2",
            [
                sys.executable,
                "-m",
                "raynb.cli",
                "node",
                "--address",
                c.info["address"],
                "--key-file",
                str(c.key_file("h2")),
                "--workers",
                "0",
                "--node-id",
                "n1",
                "--reconnect",
                "5",
            ],
            env=c.env("h2"),
            timeout=60,
        )
        assert dup.returncode == 3, dup.stderr[-2000:]
        assert "node id 'n1' is held by a live node agent on" in dup.stderr, dup.stderr[-2000:]
        assert f"({c.net.ips['h1']}, pid " in dup.stderr, dup.stderr[-2000:]
        st = c.status()
        assert st["duplicate_nodes_refused"] == 1
        assert sorted(n["node_id"] for n in st["nodes"]) == ["n1", "n2"]
        assert json.dumps(st)  # the status still reads
