"""A client without the cluster's Curve keys, at a head off loopback (which speaks CurveZMQ
only), is told at once what is wrong and how to fix it (the head's connection file, which
file, which call), never "the head does not answer"; nothing of it reaches the head's loop.
The head listens on 198.18.0.1 in a network namespace (``tests/support/netns.py``)."""

from __future__ import annotations

import textwrap

import pytest
from support import netns
from support.multihost_fixture import hosts_up

NO_CURVE_CLIENTS = """
    from raynb.cluster.connection_file import read_connection_file, write_connection_file
    from raynb.cluster.protocol.control import Client
    info = read_connection_file(KEY_FILE)
    out = {}
    # 1. the cluster key alone, as on loopback
    t0 = time.monotonic()
    try:
        raynb.connect(ADDRESS, key=info["key"])
        out["key"] = {"outcome": "connected"}
    except raynb.ClusterError as e:
        out["key"] = {"outcome": type(e).__name__, "message": str(e), "s": time.monotonic() - t0}
    # 2. a connection file without the Curve keys (a loopback head's, edited by hand)
    bare = dict(info)
    bare.pop("curve")
    path = os.path.join(os.environ["RAYNB_HOME"], "bare.json")
    write_connection_file(bare, path)
    t0 = time.monotonic()
    try:
        raynb.connect(path)
        out["file"] = {"outcome": "connected"}
    except raynb.ClusterError as e:
        out["file"] = {"outcome": type(e).__name__, "message": str(e), "s": time.monotonic() - t0}
    # 3. the protocol's client itself, as raynb's launchers use it: a request fails at once
    c = Client(ADDRESS, info["key"].encode(), bare)
    t0 = time.monotonic()
    try:
        c.request("ping", reply_types=("pong",), timeout=20)
        out["request"] = {"outcome": "answered"}
    except raynb.ClusterError as e:
        out["request"] = {"outcome": type(e).__name__, "message": str(e), "s": time.monotonic() - t0}
    c.close()
    # the right file still connects
    out["right"] = raynb.connect(KEY_FILE).status()["rejected_connections"]
    print(json.dumps(out))
"""


def test_a_client_without_curve_keys_is_told_to_use_the_connection_file(tmp_path):
    why = netns.available()
    if why:
        pytest.skip(why)
    with hosts_up(tmp_path, nodes=(), tag="nk") as c:
        out, r = c.client(textwrap.dedent(NO_CURVE_CLIENTS), timeout=90)
        for case in ("key", "file", "request"):
            got = out[case]
            assert got["outcome"] == "KeyRefused", (case, got, r.stderr[-2000:])
            assert got["s"] < 2.0, (case, got)
            message = got["message"]
            assert "does not answer" not in message and "no reply" not in message, (case, message)
            assert "no Curve keys" in message and "CurveZMQ" in message, (case, message)
            # the fix: which file, and how to pass it
            assert "$RAYNB_HOME/cluster.json" in message and "key_file=" in message, (case, message)
            assert c.info["address"] in message, (case, message)
        assert "key=... or $RAYNB_KEY" in out["key"]["message"]
        assert "bare.json" in out["file"]["message"]
        assert out["right"] >= 3  # the head counted the three refused handshakes
