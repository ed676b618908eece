"""Security hardening: a RAYNB_HOME of another user's, the torch store, frame sizes,
a full disk, malformed messages from a key holder.

As root, "another user" is a file chowned to nobody (uid 65534). A fake head is a
real ZeroMQ ROUTER in a process whose command line names raynb's head module (as
an attacker's would, to pass the pid check); it records whatever reaches it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager

import cloudpickle
import pytest

import raynb
from raynb.cluster.protocol import messages

cloudpickle.register_pickle_by_value(sys.modules[__name__])

NOBODY = 65534
QUIET = raynb.RunConfig(verbose=0)

FAKE_HEAD = r"""
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.ROUTER)
port = s.bind_to_random_port("tcp://127.0.0.1")
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(port))
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    frames = s.recv_multipart()
    with open(sys.argv[2], "a") as f:
        f.write(repr(frames[1:3])[:200] + "\n")
"""


def cli(*args, env, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "raynb", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


@contextmanager
def fake_head(tmp_path):
    """A process posing as a head; yields (connection info, file of what it received)."""
    port_file, received = tmp_path / "fake-port", tmp_path / "fake-received"
    received.write_text("")
    proc = subprocess.Popen(
        [sys.executable, "-c", FAKE_HEAD, str(port_file), str(received), "raynb.cluster.head"]
    )
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the fake head did not start"
            time.sleep(0.05)
        info = {
            "address": f"tcp://127.0.0.1:{port_file.read_text()}",
            "key": "a" * 64,
            "workers": 1,
            "pids": {"head": proc.pid, "node": proc.pid},
            "created": time.time(),
            "version": messages.PROTOCOL_VERSION,
            "token": "planted",
        }
        yield info, received
    finally:
        proc.kill()
        proc.wait()


def plant(home, info, *, mode=0o600, home_mode=0o700, owner=None):
    home.mkdir(exist_ok=True)
    conn = home / "cluster.json"
    conn.write_text(json.dumps(info))
    os.chmod(conn, mode)
    os.chmod(home, home_mode)
    if owner is not None:
        os.chown(conn, owner, owner)
        os.chown(home, owner, owner)
    return conn


FIT = """
import raynb
def f():
    return 1
raynb.TorchTrainer(f, run_config=raynb.RunConfig(verbose=0)).fit()
"""


def assert_refused(env, path, fix, received):
    """``raynb status``, ``raynb start`` and ``fit()`` refuse, naming ``path`` and ``fix``;
    the planted head never heard from any of them."""
    for args in (("status",), ("stop",), ("start", "--workers", "1")):
        p = cli(*args, env=env)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert str(path) in p.stderr and fix in p.stderr, (args, p.stderr)
    p = subprocess.run([sys.executable, "-c", FIT], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode != 0 and "ClusterError" in p.stderr, p.stderr
    assert str(path) in p.stderr and fix in p.stderr, p.stderr
    time.sleep(0.3)
    assert received.read_text() == "", "a client sent the planted head a message"


def test_a_raynb_home_of_another_user_is_refused_and_its_head_never_contacted(tmp_path):
    with fake_head(tmp_path) as (info, received):
        home = tmp_path / "home"
        plant(home, info, owner=NOBODY)
        env = dict(os.environ, RAYNB_HOME=str(home))
        assert_refused(env, home, "owned by uid 65534", received)
        # Only the connection file planted (in a home of ours): refused as well.
        os.chown(home, os.getuid(), os.getgid())
        assert_refused(env, home / "cluster.json", "owned by uid 65534", received)
        assert not (home / "start.lock").exists() or (home / "start.lock").stat().st_uid == os.getuid()


def test_a_raynb_home_others_may_write_is_refused(tmp_path):
    with fake_head(tmp_path) as (info, received):
        home = tmp_path / "home"
        plant(home, info, home_mode=0o777)
        env = dict(os.environ, RAYNB_HOME=str(home))
        assert_refused(env, home, f"chmod 700 {home}", received)
        os.chmod(home, 0o775)  # group-writable: as bad
        assert_refused(env, home, f"chmod 700 {home}", received)


def test_a_connection_file_others_may_read_is_refused(tmp_path):
    with fake_head(tmp_path) as (info, received):
        home = tmp_path / "home"
        conn = plant(home, info, mode=0o644)
        env = dict(os.environ, RAYNB_HOME=str(home))
        assert_refused(env, conn, f"chmod 600 {conn}", received)
        assert "holds the cluster key" in cli("status", env=env).stderr


def test_a_symlinked_connection_file_or_lock_is_never_followed(tmp_path):
    with fake_head(tmp_path) as (info, received):
        home = tmp_path / "home"
        elsewhere = tmp_path / "elsewhere.json"
        plant(home, info)
        os.replace(home / "cluster.json", elsewhere)
        os.symlink(elsewhere, home / "cluster.json")
        env = dict(os.environ, RAYNB_HOME=str(home))
        assert_refused(env, home / "cluster.json", "symbolic link", received)
    # A symlinked start.lock (or log) would make `raynb start` truncate or append to its target.
    home2, target = tmp_path / "home2", tmp_path / "precious"
    home2.mkdir(mode=0o700)
    target.write_text("keep me")
    os.symlink(target, home2 / "start.lock")
    p = cli("start", "--workers", "1", env=dict(os.environ, RAYNB_HOME=str(home2)))
    assert p.returncode == 2 and str(home2 / "start.lock") in p.stderr and "symbolic link" in p.stderr, (
        p.stderr
    )
    assert target.read_text() == "keep me"
    assert not (home2 / "cluster.json").exists()


def _mode(path) -> int:
    return os.stat(path).st_mode & 0o777


def _checkpointing(config):
    import os
    import tempfile

    from raynb import Checkpoint
    from raynb.train import get_context, report

    print("some output")
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "state.bin"), "w") as f:
            f.write("weights")
        os.chmod(os.path.join(d, "state.bin"), 0o644)
        os.makedirs(os.path.join(d, "sub"), mode=0o755)
        report(
            {"x": 1}, checkpoint=Checkpoint.from_directory(d) if get_context().get_world_rank() == 0 else None
        )


def test_run_directories_and_checkpoints_are_private(warm, tmp_path):
    old = os.umask(0o022)
    try:
        result = raynb.TorchTrainer(
            _checkpointing,
            scaling_config=raynb.ScalingConfig(num_workers=2),
            run_config=raynb.RunConfig(verbose=0, storage_path=str(tmp_path)),
        ).fit()
    finally:
        os.umask(old)
    run = result.path
    assert _mode(run) == 0o700
    for name in ("function.pkl", "run.json", "params.json", "result.json", "progress.csv", "output.log"):
        assert _mode(os.path.join(run, name)) == 0o600, name
    ckpt = result.checkpoint.path
    assert _mode(ckpt) == 0o700 and _mode(os.path.join(ckpt, "sub")) == 0o700
    assert _mode(os.path.join(ckpt, "state.bin")) & 0o077 == 0
    # What a Tune experiment writes (tuner.pkl: the pickled settings) is private too.
    from raynb import tune

    grid = tune.Tuner(
        lambda config: tune.report({"v": config["v"]}),
        param_space={"v": 1},
        tune_config=tune.TuneConfig(num_samples=1),
        run_config=raynb.RunConfig(storage_path=str(tmp_path / "tune"), verbose=0),
    ).fit()
    exp = grid.experiment_path
    assert _mode(exp) == 0o700
    for name in ("tuner.pkl", "experiment_state.json"):
        assert _mode(os.path.join(exp, name)) == 0o600, name
    # Directories raynb makes on the way, whatever the umask (mkdir(parents=True) gave them
    # its mode: 0777 under umask 0), and a run directory made before by hand (it stayed 0755).
    old = os.umask(0)
    try:
        grid = tune.Tuner(
            lambda config: tune.report({"v": 1}),
            tune_config=tune.TuneConfig(num_samples=1),
            run_config=raynb.RunConfig(storage_path=str(tmp_path / "new" / "deep"), verbose=0),
        ).fit()
    finally:
        os.umask(old)
    assert _mode(tmp_path / "new") == _mode(tmp_path / "new" / "deep") == _mode(grid.experiment_path) == 0o700
    (tmp_path / "made_before").mkdir(mode=0o755)
    os.chmod(tmp_path / "made_before", 0o755)
    result = raynb.TorchTrainer(
        _checkpointing,
        scaling_config=raynb.ScalingConfig(num_workers=2),
        run_config=raynb.RunConfig(name="made_before", verbose=0, storage_path=str(tmp_path)),
    ).fit()
    assert result.path == str(tmp_path / "made_before") and _mode(result.path) == 0o700


# -- the torch.distributed store ----------------------------------------------------------
def _listeners(pid) -> list[tuple[str, int]]:
    import psutil

    return [
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    ]


def _loopback(ip: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(ip.removeprefix("::ffff:")).is_loopback


def _all_reduce(config):
    import os

    import torch
    import torch.distributed as dist

    t = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    return t.item(), os.getpid()


def test_a_local_run_listens_on_loopback_only_and_opens_no_tcp_store(warm):
    from raynb.train.fit_run import execute_run

    _, (total, pid) = execute_run(_all_reduce, None, raynb.ScalingConfig(num_workers=2), QUIET)
    assert total == 3.0
    workers = [w["pid"] for w in warm.status()["workers"]]
    assert pid in workers
    for w in workers:
        exposed = [a for a in _listeners(w) if not _loopback(a[0])]
        assert exposed == [], f"worker {w} listens on {exposed} (a TCPStore on every interface?)"


@contextmanager
def private_cluster(tmp_path, monkeypatch, workers: int = 1, **kw):
    """conftest.private_cluster with start_cluster keywords; yields (info, client)."""
    from conftest import private_cluster as shared

    with shared(tmp_path, monkeypatch, workers, **kw) as (info, client, _):
        yield info, client


@pytest.mark.timeout(120)
@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_a_run_across_nodes_meets_at_a_store_bound_to_the_node_ip(tmp_path, monkeypatch, host):
    """Loopback head: no store until a group spans nodes. A head on every interface:
    each worker's store listens from its start, on its node's IP only."""
    from conftest import alive

    from raynb.train.fit_run import execute_run

    with private_cluster(tmp_path, monkeypatch, 1, max_workers=1, host=host) as (info, client):
        from raynb.cluster.protocol import curve_auth as curve

        # Off loopback (0.0.0.0) every link is CurveZMQ: the agent gets the Curve client keys
        # as the head hands them to its own node agent.
        env = dict(os.environ, RAYNB_KEY=info["key"], **curve.to_env(info.get("curve")))
        with open(tmp_path / "node2.log", "wb") as log:
            node = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "raynb.cluster.node.agent",
                    "--address",
                    info["address"],
                    "--workers",
                    "1",
                    "--max-workers",
                    "1",
                    "--node-id",
                    "second",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 60
            while len(client.status()["workers"]) < 2:
                assert time.monotonic() < deadline, (tmp_path / "node2.log").read_text()
                time.sleep(0.1)
            st = client.status()
            assert {w["node_id"] for w in st["workers"]} == {"local", "second"}
            ips = {n["ip"] for n in st["nodes"]}
            for w in st["workers"]:
                found = _listeners(w["pid"])
                if host == "127.0.0.1":  # a loopback-only cluster: no store before a group needs one
                    assert found == [], f"worker {w['worker_id']} listens before any run: {found}"
                else:
                    assert len(found) == 1 and found[0][0] in ips, (found, ips)
            _, (total, pid) = execute_run(_all_reduce, None, raynb.ScalingConfig(num_workers=2), QUIET)
            assert total == 3.0
            for w in client.status()["workers"]:
                exposed = [a for a in _listeners(w["pid"]) if not _loopback(a[0]) and a[0] not in ips]
                assert exposed == [], f"worker {w['worker_id']} listens on {exposed}"
            _, (total, _) = execute_run(_all_reduce, None, raynb.ScalingConfig(num_workers=2), QUIET)
            assert total == 3.0  # the group (and its store) is kept for the next run
            assert client.status()["rejected_messages"] == 0  # what raynb sends fits its schemas
        finally:
            node.terminate()
            node.wait(timeout=30)
            assert not alive([node.pid])


# -- frame sizes ------------------------------------------------------------------------
def _rss(pid) -> int:
    import psutil

    return psutil.Process(pid).memory_info().rss


def _stream_frame(address, claimed: int, send: int, more: bool = False):
    """A raw ZMTP peer that announces a ``claimed``-byte frame and sends ``send`` bytes
    of it (or until the head hangs up); returns the open socket and what it sent."""
    import socket
    import struct

    from support.zmtp import zmtp_greeting, zmtp_ready

    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.settimeout(10)
    block, sent = b"\0" * (1 << 20), 0
    try:
        s.sendall(zmtp_greeting() + zmtp_ready(identity=b"client:big"))
        s.sendall(bytes([0x03 if more else 0x02]) + struct.pack(">Q", claimed))
        while sent < send:
            s.sendall(block)
            sent += len(block)
    except OSError:
        pass  # dropped by the head
    return s, sent


def test_unsigned_oversized_frames_are_not_held_by_the_head(warm):
    """Three peers sending 900 MB frames took the head to 2.7 GB: each frame was buffered
    whole before any check. Now a frame over the limit drops its connection at once."""
    head = warm.info["pids"]["head"]
    before = _rss(head)
    peers = [_stream_frame(warm.info["address"], 900 << 20, 150 << 20) for _ in range(3)]
    time.sleep(0.5)
    grown = _rss(head) - before
    for s, _ in peers:
        s.close()
    print(
        f"head RSS {before / 2**20:.0f} MiB, +{grown / 2**20:.0f} MiB with 3 peers sending "
        f"{[sent >> 20 for _, sent in peers]} MiB of 900 MB frames"
    )
    assert grown < 40 << 20, f"the head grew by {grown / 2**20:.0f} MiB"
    assert all(sent < 150 << 20 for _, sent in peers), "the head read a whole oversized frame"
    assert warm.ping(timeout=5.0)


def _big_function(config):
    return len(config["blob"]), bytes(reversed(config["blob"]))[:16], b"r" * (3 << 20)


def test_large_payloads_travel_in_signed_chunks(warm):
    """A function with 20 MiB of captured data and a 3 MiB return value: both over the
    frame limit, so both travel as trains of signed chunks, and the run works."""
    from raynb.cluster.protocol import chunking
    from raynb.train.fit_run import execute_run

    blob = os.urandom(20 << 20)
    assert len(blob) > 10 * chunking.FRAME_BYTES
    _, (n, tail, ret) = execute_run(_big_function, {"blob": blob}, raynb.ScalingConfig(num_workers=2), QUIET)
    assert n == len(blob) and tail == bytes(reversed(blob))[:16] and ret == b"r" * (3 << 20)


# -- malformed messages from a key holder --------------------------------------------------
def test_a_key_holders_malformed_messages_are_rejected_and_counted(warm):
    """node_register with max_workers="x" was stored, and the head's tick crashed on it
    10 s later (when the silent node was dropped and the queue rescheduled)."""
    import uuid

    import zmq
    from test_protocol import dealer, head_still_works, rejected_count, submit_spec, sync

    from raynb.cluster.head.server import NODE_TIMEOUT_S
    from raynb.cluster.protocol import messages

    address, key = warm.info["address"], warm.info["key"].encode()
    node = {
        "node_id": "evil",
        "hostname": "h",
        "ip": "127.0.0.1",
        "pid": 1,
        "num_workers": 1,
        "max_workers": 2,
    }
    ready = {"worker_id": "evil-w1", "pid": 2, "node_id": "evil", "hostname": "h", "ip": "127.0.0.1"}
    bad = [
        ("node", messages.NODE_REGISTER, {**node, "max_workers": "x"}),
        ("node", messages.NODE_REGISTER, {**node, "num_workers": True}),
        ("node", messages.NODE_REGISTER, {k: v for k, v in node.items() if k != "ip"}),
        ("node", messages.NODE_STATS, {"workers": [1, 2]}),
        ("node", messages.NODE_STATS, {"workers": {"local-w1": {"pid": 1, "cpu_percent": "hot"}}}),
        ("node", messages.WORKER_EXITED, {"worker_id": "local-w1", "pid": 1, "signal": "KILL"}),
        ("worker", messages.WORKER_READY, {**ready, "pid": "p"}),
        ("worker", messages.TASK_DONE, {"run_id": "r", "rank": "0", "status": "ok"}),
        (
            "worker",
            messages.TASK_DONE,
            {"run_id": "r", "rank": 0, "status": "error", "error": {"message": 5}},
        ),
        (
            "worker",
            messages.TASK_EVENT,
            {"run_id": "r", "rank": 0, "event": {"kind": "report", "index": "x"}},
        ),
        ("client", messages.SUBMIT_RUN, {**submit_spec(uuid.uuid4().hex), "num_workers": "2"}),
        (
            "client",
            messages.SUBMIT_RUN,
            {**submit_spec(uuid.uuid4().hex), "checkpoint_config": {"num_to_keep": "all"}},
        ),
        ("client", messages.CANCEL_RUN, {"run_id": 5}),
        ("client", messages.GET_RUN, {"name": ["x"]}),
        ("client", messages.PING, ["not", "a", "dict"]),
    ]
    before = rejected_count(warm)
    session = messages.Session(key)
    ctx = zmq.Context()
    try:
        for role, msg_type, content in bad:
            with dealer(ctx, address, messages.routing_id(role, "evil")) as s:
                session.send(s, msg_type, content, [b"fn"] if msg_type == messages.SUBMIT_RUN else ())
                sync(s, session)
    finally:
        ctx.destroy(linger=0)
    assert rejected_count(warm) - before == len(bad)
    st = warm.status()
    assert "evil" not in {n["node_id"] for n in st["nodes"]}
    assert "evil-w1" not in {w["worker_id"] for w in st["workers"]}
    time.sleep(NODE_TIMEOUT_S + 1.5)  # past the tick that dropped the silent node
    head_still_works(warm)


# -- a full disk, and a flood of rejected messages ----------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB file system (tmpfs), unmounted afterwards."""
    d = tmp_path / "small"
    d.mkdir()
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(d)], capture_output=True, text=True
    )
    if p.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {p.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=True)


def _chatty(config):
    import time

    line = "x" * 200
    for i in range(config["lines"]):
        print(i, line)
    time.sleep(config.get("sleep", 0))
    return "done"


def test_a_full_disk_fails_the_run_not_the_head(warm, small_disk):
    """A rank's output filled the storage path: RunDirectory.flush() raised in the head's
    tick and the whole cluster died. Now the run fails naming the file and ENOSPC."""
    from raynb.train.fit_run import execute_run

    head = warm.info["pids"]["head"]
    for sleep in (0, 5):  # output still running when it fails (cancelled), or all sent already
        with pytest.raises(raynb.RunError) as ei:
            execute_run(
                _chatty,
                {"lines": 20000, "sleep": sleep},
                raynb.ScalingConfig(num_workers=2),
                raynb.RunConfig(verbose=0, storage_path=str(small_disk)),
            )
        text = str(ei.value)
        assert str(small_disk) in text and "ENOSPC" in text, text
        assert ei.value.state == "FAILED"
        assert warm.ping(timeout=5.0) and warm.status()["pid"] == head, "the head was replaced"
        for log in small_disk.glob("*/output.log"):
            log.unlink()  # room for the next run's files
    # The next run, on normal storage, works on the same warm cluster.
    _, ret = execute_run(_chatty, {"lines": 3}, raynb.ScalingConfig(num_workers=2), QUIET)
    assert ret == "done"
    # Creating a run there with the disk full is refused, naming the path.
    filler = small_disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    with pytest.raises(ValueError, match="ENOSPC"):
        execute_run(
            _chatty,
            {"lines": 1},
            raynb.ScalingConfig(num_workers=1),
            raynb.RunConfig(verbose=0, storage_path=str(small_disk)),
        )
    assert warm.ping(timeout=5.0)


def test_rejected_messages_are_logged_as_a_summary_not_one_line_each(warm):
    """34,600 rejected messages a second, 100 bytes each, grew head.log by 11 GiB an hour."""
    import re

    import zmq
    from test_protocol import dealer, rejected_count, sync

    from raynb.cluster.protocol import messages

    log_path = os.path.join(os.environ["RAYNB_HOME"], "logs", "head.log")
    size = os.path.getsize(log_path)
    before = rejected_count(warm)
    ctx = zmq.Context()
    try:
        with dealer(ctx, warm.info["address"]) as s:
            for i in range(5000):
                s.send_multipart([b"%05d" % i + b"g" * 95])
            sync(s, messages.Session(warm.info["key"].encode()), timeout=60)
    finally:
        ctx.destroy(linger=0)
    assert rejected_count(warm) - before == 5000
    time.sleep(6.0)  # the summary of the burst is written within a few seconds
    with open(log_path, errors="replace") as f:
        f.seek(size)
        lines = [line for line in f if "rejected" in line]
    assert 1 <= len(lines) <= 4, lines
    counted = sum(
        1 if "rejected a message" in line else int(re.search(r"rejected (\d+) messages", line)[1])
        for line in lines
    )
    assert counted == 5000, lines


def test_refused_peers_are_logged_once_every_few_seconds_whatever_their_routing_ids(warm):
    """A wrong-key peer that took a new routing id per connection wrote a 'refused' line
    each time: 1,636 lines in 20 s from one Python loop (rate-limited per id only)."""
    import uuid

    import zmq
    from test_protocol import dealer, sync

    from raynb.cluster.head.node_events import REFUSALS_LOGGED_EVERY_S
    from raynb.cluster.protocol import messages

    log_path = os.path.join(os.environ["RAYNB_HOME"], "logs", "head.log")
    size = os.path.getsize(log_path)
    wrong = messages.Session(b"not-the-cluster-key-" * 3)
    tag = uuid.uuid4().hex[:8].encode()
    ctx = zmq.Context()

    def burst(count: int) -> None:
        for i in range(count):
            with dealer(ctx, warm.info["address"], identity=b"node:%s-%d:x" % (tag, i)) as s:
                wrong.send(s, messages.PING)
                assert s.poll(5000), "no refusal notice came back"  # each peer is still told why
        with dealer(ctx, warm.info["address"]) as s:
            sync(s, messages.Session(warm.info["key"].encode()))

    def logged() -> list[str]:
        with open(log_path, errors="replace") as f:
            f.seek(size)
            return [line for line in f if "WARNING refused" in line and f"b'node:{tag.decode()}" in line]

    # The shared head may have refused a peer of another test less than an interval ago.
    time.sleep(REFUSALS_LOGGED_EVERY_S + 0.2)
    size = os.path.getsize(log_path)
    try:
        burst(40)
        # The 39 not logged are counted once the interval is over, with no later refusal to
        # carry the count (the head's tick writes it; it waited for the next refusal before).
        deadline = time.monotonic() + REFUSALS_LOGGED_EVERY_S + 5
        while len(logged()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        lines = logged()
        assert len(lines) == 2, lines
        assert f"refused b'node:{tag.decode()}-0:x'" in lines[0] and "wrong cluster key" in lines[0], lines
        assert (
            "refused 39 more peers since the last such line, the latest "
            f"b'node:{tag.decode()}-39:x': the head refused this peer: wrong cluster key" in lines[1]
        ), lines
        time.sleep(REFUSALS_LOGGED_EVERY_S + 0.2)
        burst(1)  # a new interval: logged at once, with nothing to count
    finally:
        ctx.destroy(linger=0)
    lines = logged()
    assert len(lines) == 3 and "more peers" not in lines[2] and "wrong cluster key" in lines[2], lines


@pytest.fixture
def ctl(tmp_path):
    from support.controller_harness import Harness

    return Harness(tmp_path)


WRITE_ERROR = "could not write /x/output.log: No space left on device (ENOSPC): the run cannot keep its files"


def test_a_write_error_fails_a_running_run_without_a_restart(ctl):
    run = ctl.running(max_failures=3)
    run.write_error = WRITE_ERROR
    ctl.ctl.storage_failed(run)
    assert run.state == "FAILING" and sorted(ctl.effects.ranks("cancel_rank")) == [0, 1, 2]
    for rank in range(3):
        ctl.ctl.rank_returned(run, rank, "cancelled")
    assert run.state == "FAILED", "a write error must not restart the run (max_failures=3)"
    assert run.errors[0]["message"] == WRITE_ERROR
    assert ctl.effects.named("requeue") == []


def test_a_write_error_fails_a_queued_run_and_a_run_at_its_end(ctl):
    queued = ctl.run()
    queued.write_error = WRITE_ERROR
    ctl.ctl.storage_failed(queued)
    assert queued.state == "FAILED" and queued.errors == [{"message": WRITE_ERROR}]
    # Every rank returned, but committing its last checkpoint hit the full disk.
    run = ctl.running(world_size=2)

    def commit(r, run_ended=False):
        r.write_error = WRITE_ERROR

    ctl.store.commit_checkpoints = commit
    ctl.ctl.rank_returned(run, 1, "ok")
    ctl.ctl.rank_returned(run, 0, "ok", value_frames=[b"v"])
    assert run.state == "FAILED" and run.errors[0]["message"] == WRITE_ERROR
    # A run being cancelled ends CANCELLED, as asked.
    cancelled = ctl.cancelling()
    cancelled.write_error = WRITE_ERROR
    ctl.ctl.storage_failed(cancelled)
    assert cancelled.state == "CANCELLING"


def test_what_raynb_submits_fits_the_submit_schema(tmp_path):
    """A config of any JSON-able kind, numpy numbers and a Path in the configs: the spec
    raynb builds passes the head's check (else the head drops it and fit() waits)."""
    import numpy as np

    from raynb.client.submit_and_follow import build_submission
    from raynb.cluster.protocol import messages

    for config in (None, "a string", [1, 2], {"lr": np.float32(0.1), "n": np.int64(3)}):
        spec, _ = build_submission(
            _chatty,
            config,
            raynb.ScalingConfig(num_workers=2, use_gpu=np.bool_(False), timeout_s=np.int64(5)),
            raynb.RunConfig(
                storage_path=tmp_path,
                checkpoint_config=raynb.CheckpointConfig(num_to_keep=2),
                failure_config=raynb.FailureConfig(max_failures=-1),
            ),
            extra={"resume": True},
        )
        assert messages.SCHEMAS[messages.SUBMIT_RUN].problem(spec) is None, (
            config,
            messages.SCHEMAS[messages.SUBMIT_RUN].problem(spec),
        )
