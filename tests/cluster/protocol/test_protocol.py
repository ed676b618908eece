"""The signed wire protocol: unit tests of Session, and attacks on a live head.

The live tests talk to the session cluster's head from raw ZeroMQ DEALER
sockets and raw TCP sockets, as a hostile local process would.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pickle
import random
import socket
import struct
import time
import uuid
from contextlib import contextmanager

import pytest
import zmq
from conftest import wait_idle_workers
from support.zmtp import zmtp_greeting, zmtp_ready

import raynb
from raynb.client.shipping import dumps_payload
from raynb.cluster.protocol import messages

KEY = b"k" * 64


# -- helpers -------------------------------------------------------------------------
def raw(frames) -> list[bytes]:
    return [f.bytes if isinstance(f, zmq.Frame) else bytes(f) for f in frames]


def sign(key: bytes, header: dict, content, buffers=()) -> list[bytes]:
    """The wire format as documented (independent of Session): HMAC-SHA256 over every
    frame after the signature, each prefixed by its length as a little-endian u64, a
    frame over 64 KiB by its SHA-256."""
    frames = [json.dumps(header).encode(), pickle.dumps(content, protocol=5), *buffers]
    h = hmac.new(key, digestmod=hashlib.sha256)
    for f in frames:
        h.update(struct.pack("<Q", len(f)))
        h.update(hashlib.sha256(f).digest() if len(f) > 64 * 1024 else f)
    return [h.hexdigest().encode(), *frames]


def header(msg_type=messages.PING, *, seq=1, t=None, session=None, version=messages.PROTOCOL_VERSION) -> dict:
    return {
        "version": version,
        "msg_type": msg_type,
        "msg_id": uuid.uuid4().hex,
        "session": session or uuid.uuid4().hex,
        "seq": seq,
        "time": time.time() if t is None else t,
    }


def rejected_by(receiver: messages.Session, frames) -> str:
    with pytest.raises(messages.ProtocolError) as ei:
        receiver.deserialize(list(frames))
    return str(ei.value)


# -- Session unit tests -----------------------------------------------------------------
def test_round_trip_with_buffers_and_documented_signature():
    sender, receiver = messages.Session(KEY), messages.Session(KEY)
    bufs = [b"\x00" * 10, os.urandom(1000), b""]
    frames = raw(sender.serialize(messages.SUBMIT_RUN, {"num_workers": 2, "name": "x"}, bufs))
    assert len(frames) == 3 + len(bufs)
    # The signature is exactly the documented construction.
    hdr = json.loads(frames[1])
    assert frames == sign(KEY, hdr, pickle.loads(frames[2]), bufs)
    msg = receiver.deserialize(frames, identity=b"client:abc")
    assert msg.msg_type == messages.SUBMIT_RUN
    assert msg.content == {"num_workers": 2, "name": "x"}
    assert raw(msg.buffers) == bufs
    assert msg.identity == b"client:abc"
    assert msg.header["session"] == sender.session_id and msg.header["seq"] == 1
    # Sequence numbers grow per message.
    msg2 = receiver.deserialize(raw(sender.serialize(messages.PING)))
    assert msg2.header["seq"] == 2 and msg2.content == {}


def test_big_frames_signed_by_their_digest_and_a_payload_hashed_once_for_many_messages(monkeypatch):
    from raynb.cluster.protocol import signing

    sender = messages.Session(KEY, frame_bytes=256 << 10)
    big = os.urandom(300 << 10)  # over 64 KiB, under the chunk size: signed by digest
    frames = raw(sender.serialize(messages.SUBMIT_RUN, {"name": "x"}, [big]))
    assert frames == sign(KEY, json.loads(frames[1]), {"name": "x"}, [big])
    assert raw(messages.Session(KEY).deserialize(list(frames)).buffers) == [big]
    tampered = list(frames)
    tampered[3] = big[:-1] + bytes([big[-1] ^ 1])  # one bit of the big frame
    assert "bad or missing signature" in rejected_by(messages.Session(KEY), tampered)

    # A Payload cut into pieces for four ranks: each piece hashed once, not once per rank.
    hashed = []
    real_sha = signing.hashlib.sha256

    def counting_sha(data=b""):  # hmac also calls it, with no data, for its inner and outer hashes
        if len(memoryview(data)):
            hashed.append(len(memoryview(data)))
        return real_sha(data)

    payload = signing.Payload([os.urandom(3 << 20)])  # 3 MiB: 12 pieces of 256 KiB
    monkeypatch.setattr(signing.hashlib, "sha256", counting_sha)
    trains = [sender.messages(messages.RUN_TASK, {"rank": r}, payload) for r in range(4)]
    monkeypatch.setattr(signing.hashlib, "sha256", real_sha)
    assert sum(hashed) == 3 << 20 and len(hashed) == 12
    for train in trains:  # and every rank verifies and reassembles it
        receiver = messages.Session(KEY)
        got = [receiver.deserialize(raw(m)) for m in train]
        assert got[:-1] == [None] * 12 and raw(got[-1].buffers) == [bytes(payload[0])]
    piece = raw(trains[1][5])
    piece[3] = bytes(len(piece[3]))  # a piece replaced by zeros
    assert "bad or missing signature" in rejected_by(messages.Session(KEY), piece)


def test_round_trip_over_real_sockets_and_rejected_count():
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        b.bind("inproc://proto-test")
        a.connect("inproc://proto-test")
        sender, receiver = messages.Session(KEY), messages.Session(KEY)
        big = os.urandom(1 << 20)
        sender.send(a, messages.TASK_DONE, {"rank": 0, "status": "ok"}, [big])
        msg = receiver.recv(b)
        assert msg is not None and msg.content["status"] == "ok"
        assert messages.buffer_bytes(msg.buffers[0]) == big
        assert receiver.rejected == 0

        good = raw(sender.serialize(messages.TASK_EVENT, {"x": 1}, [b"payload"]))
        bad = [
            [good[0], good[1].replace(b'"task_event"', b'"run_task"'), *good[2:]],  # header
            [good[0], good[1], pickle.dumps({"x": 2}, protocol=5), *good[3:]],  # content
            [*good[:3], b"PAYLOAD"],  # buffer
            good[:3],  # buffer dropped
            good[:2],  # truncated
            [b"not hex at all"] + good[1:],  # bad signature
            [os.urandom(3)],  # garbage
        ]
        for frames in bad:
            a.send_multipart(frames)
            assert receiver.recv(b) is None
        assert receiver.rejected == len(bad)
        # The genuine message still goes through after all that, exactly once.
        a.send_multipart(good)
        assert receiver.recv(b).content == {"x": 1}
        a.send_multipart(good)
        assert receiver.recv(b) is None
        assert receiver.rejected == len(bad) + 1
        # A ROUTER-side receive strips the routing id first.
        ctx2_a, ctx2_b = ctx.socket(zmq.DEALER), ctx.socket(zmq.ROUTER)
        try:
            ctx2_a.setsockopt(zmq.IDENTITY, b"client:me")
            ctx2_b.bind("inproc://proto-test-router")
            ctx2_a.connect("inproc://proto-test-router")
            sender.send(ctx2_a, messages.PING, {"n": 1})
            msg = receiver.recv(ctx2_b, router=True)
            assert msg.identity == b"client:me" and msg.content == {"n": 1}
        finally:
            ctx2_a.close(0)
            ctx2_b.close(0)
    finally:
        a.close(0)
        b.close(0)
        ctx.term()


def test_tampering_is_rejected():
    sender = messages.Session(KEY)
    good = raw(sender.serialize(messages.SUBMIT_RUN, {"num_workers": 1}, [b"fn-bytes", b"more"]))

    def check(frames, why):
        receiver = messages.Session(KEY)
        assert "signature" in rejected_by(receiver, frames), why
        assert receiver.deserialize(good).content == {"num_workers": 1}  # the original is fine

    hdr = json.loads(good[1])
    hdr["seq"] = 99
    check([good[0], json.dumps(hdr).encode(), *good[2:]], "tampered header")
    content = bytearray(good[2])
    content[-2] ^= 0x01
    check([good[0], good[1], bytes(content), *good[3:]], "tampered content")
    check([*good[:3], b"fn-bytez", good[4]], "tampered first buffer")
    check([*good[:4], good[4] + b"!"], "tampered last buffer")
    check([*good, b"extra"], "buffer appended")
    check(good[:-1], "buffer dropped")
    check([good[0], good[1], good[2] + good[3], good[4]], "frame boundary moved")
    check([sign(b"w" * 64, hdr, {"num_workers": 1})[0], *good[1:]], "signature of another key")
    check([b"", *good[1:]], "empty signature")
    check([good[0].upper(), *good[1:]], "signature case changed")

    # Whole message signed with the wrong key.
    forged = raw(messages.Session(b"w" * 64).serialize(messages.SUBMIT_RUN, {"num_workers": 1}, [b"fn"]))
    assert "signature" in rejected_by(messages.Session(KEY), forged)
    # No signature frame at all: the header is taken as the signature and fails.
    assert "signature" in rejected_by(messages.Session(KEY), good[1:])
    # Fewer than three frames.
    for n in (0, 1, 2):
        assert "truncated" in rejected_by(messages.Session(KEY), good[:n])

    with pytest.raises(ValueError):
        messages.Session(b"")


def test_replay_rejected_by_digest_history():
    sender, receiver = messages.Session(KEY), messages.Session(KEY)
    frames = raw(sender.serialize(messages.SUBMIT_RUN, {"num_workers": 1}, [b"fn"]))
    receiver.deserialize(frames)
    assert "digest seen before" in rejected_by(receiver, frames)
    # The rejection did not disturb later messages from the same sender.
    assert receiver.deserialize(raw(sender.serialize(messages.PING))).msg_type == messages.PING


def test_replay_after_digest_aged_out_rejected_by_sequence():
    sender, receiver = messages.Session(KEY), messages.Session(KEY, history_size=2)
    first = raw(sender.serialize(messages.SUBMIT_RUN, {"n": 1}, [b"fn"]))
    for frames in (first, raw(sender.serialize(messages.PING)), raw(sender.serialize(messages.PING))):
        receiver.deserialize(frames)
    assert first[0] not in receiver._history  # aged out of the 2-digest history
    assert "sequence number" in rejected_by(receiver, first)
    # A captured message replayed *before* a later one was delivered: still refused
    # once the later one arrived, and an equal seq from the same session is refused.
    later = raw(sender.serialize(messages.PING))
    receiver.deserialize(later)
    same_seq = sign(KEY, {**json.loads(later[1]), "msg_id": "other"}, {})
    assert "sequence number" in rejected_by(receiver, same_seq)
    # Another sender's sequence is independent.
    assert receiver.deserialize(raw(messages.Session(KEY).serialize(messages.PING))).msg_type == messages.PING


def test_old_and_future_timestamps_rejected():
    receiver = messages.Session(KEY)
    now = time.time()
    old = sign(KEY, header(t=now - messages.MAX_MESSAGE_AGE_S - 60), {})
    assert "timestamp" in rejected_by(receiver, old)
    future = sign(KEY, header(t=now + messages.MAX_MESSAGE_AGE_S + 60), {})
    assert "timestamp" in rejected_by(receiver, future)
    recent = sign(KEY, header(t=now - 5), {"ok": True})
    assert receiver.deserialize(recent).content == {"ok": True}


def test_signed_but_malformed_messages_rejected():
    receiver = messages.Session(KEY)
    assert "unknown message type" in rejected_by(receiver, sign(KEY, header("exec_code"), {}))
    other = f"{int(messages.PROTOCOL_VERSION.split('.')[0]) + 1}.0"  # another major version
    assert "version" in rejected_by(receiver, sign(KEY, header(version=other), {}))
    for bad in ({"msg_type": messages.PING}, {**header(), "seq": "many"}, {**header(), "time": None}):
        assert "malformed header" in rejected_by(receiver, sign(KEY, bad, {}))
    not_json = [
        b"",
        b"{not json",
        pickle.dumps({}),
    ]
    h = hmac.new(KEY, digestmod=hashlib.sha256)
    for f in not_json[1:]:
        h.update(struct.pack("<Q", len(f)))
        h.update(f)
    not_json[0] = h.hexdigest().encode()
    assert "malformed header" in rejected_by(receiver, not_json)


def test_content_never_unpickled_before_the_signature_checks_out(tmp_path):
    """A forged content frame carrying a pickle that would run code is never loaded."""
    marker = tmp_path / "unpickled"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    good = raw(messages.Session(KEY).serialize(messages.PING))
    forged = [good[0], good[1], pickle.dumps(Evil()), *good[3:]]
    receiver = messages.Session(KEY)
    rejected_by(receiver, forged)
    # ... and through recv() too, where the failure is only counted.
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        b.bind("inproc://evil")
        a.connect("inproc://evil")
        a.send_multipart(raw(messages.Session(b"w" * 64).serialize(messages.PING)))
        a.send_multipart(forged)
        assert receiver.recv(b) is None and receiver.recv(b) is None
        assert receiver.rejected == 2
    finally:
        a.close(0)
        b.close(0)
        ctx.term()
    assert not marker.exists()


# -- against the live head -----------------------------------------------------------
@pytest.fixture
def zctx():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


@contextmanager
def dealer(ctx, address, identity: bytes | None = None):
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.IDENTITY, identity or f"client:probe-{uuid.uuid4().hex}".encode())
    s.connect(address)
    try:
        yield s
    finally:
        s.close(0)


def sync(sock, session: messages.Session, timeout: float = 10.0) -> list[messages.Message]:
    """Ping the head over ``sock`` and wait for the pong: everything sent before it on
    this connection has then been handled. Returns the other messages that came back."""
    from raynb.cluster.protocol.rejects import refusal

    session.send(sock, messages.PING)
    others = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sock.poll(100):
            frames = sock.recv_multipart()
            why = refusal(frames)
            if why is not None:
                # The head's unsigned notice to a peer whose message it rejected: two frames,
                # a marker and a reason, nothing of the cluster's and nothing to unpickle.
                assert len(frames) == 2 and why.startswith("the head refused"), frames
                continue
            msg = session.accept(frames)
            assert msg is not None, "the head sent a message that does not verify"
            if msg.msg_type == messages.PONG:
                return others
            others.append(msg)
    raise AssertionError("the head did not answer a ping")


def rejected_count(client) -> int:
    return client.status()["rejected_messages"]


def marker_fn(path: str):
    def write_marker():
        with open(path, "a") as f:
            f.write("ran\n")

    return write_marker


def submit_spec(run_id: str, num_workers: int = 1) -> dict:
    """A submit_run spec as runner.execute_run builds it."""
    return {
        "run_id": run_id,
        "name": None,
        "name_prefix": "ProtocolTest",
        "num_workers": num_workers,
        "use_gpu": False,
        "timeout_s": None,
        "storage_path": None,
        "params": {},
        "cwd": os.getcwd(),
        "sys_path": [],
    }


def submit_frames(session: messages.Session, marker: str, run_id: str) -> list[bytes]:
    payload = dumps_payload(marker_fn(marker), None, {})
    return raw(session.serialize(messages.SUBMIT_RUN, submit_spec(run_id), [payload]))


def run_ids(client) -> set:
    return {r["run_id"] for r in client.status()["runs"]}


def assert_never_runs(marker, client, run_id, wait: float = 1.0):
    time.sleep(wait)  # a run that got through starts within milliseconds on a warm worker
    assert not os.path.exists(marker), "a rejected message's function ran"
    assert run_id not in run_ids(client), "the head recorded a run from a rejected message"


def wait_done(sock, session, run_id, timeout=30.0) -> list[messages.Message]:
    msgs = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sock.poll(100):
            msg = session.recv(sock)
            assert msg is not None
            msgs.append(msg)
            if msg.msg_type == messages.RUN_DONE and msg.content["run_id"] == run_id:
                return msgs
            assert msg.msg_type != messages.ERROR, msg.content
    raise AssertionError(f"run {run_id} did not finish: {[m.msg_type for m in msgs]}")


def test_forged_and_unsigned_submit_never_run(warm, zctx, tmp_path):
    address, key = warm.info["address"], warm.info["key"].encode()
    before = rejected_count(warm)
    marker = str(tmp_path / "forged")
    forged_id, unsigned_id, swapped_id = (uuid.uuid4().hex for _ in range(3))
    forged = submit_frames(messages.Session(b"0" * 64), marker, forged_id)  # the wrong key
    genuine = submit_frames(messages.Session(key), marker, unsigned_id)
    # A genuinely signed submit whose function frame was swapped for the marker writer.
    benign = raw(
        messages.Session(key).serialize(
            messages.SUBMIT_RUN, submit_spec(swapped_id), [dumps_payload(lambda: None, None, {})]
        )
    )
    swapped = [*benign[:3], forged[3]]
    with dealer(zctx, address) as s:
        s.send_multipart(forged)
        s.send_multipart([b"", *genuine[1:]])  # empty signature
        s.send_multipart(genuine[1:])  # no signature frame at all
        s.send_multipart(swapped)
        replies = sync(s, messages.Session(key))
    assert replies == [], [m.msg_type for m in replies]
    assert rejected_count(warm) - before == 4
    for run_id in (forged_id, unsigned_id, swapped_id):
        assert_never_runs(marker, warm, run_id, wait=0.5)


def test_replayed_submit_rejected(warm, zctx, tmp_path):
    address, key = warm.info["address"], warm.info["key"].encode()
    marker = str(tmp_path / "replayed")
    run_id = uuid.uuid4().hex
    session = messages.Session(key)
    frames = submit_frames(session, marker, run_id)
    with dealer(zctx, address) as s:
        s.send_multipart(frames)
        msgs = wait_done(s, session, run_id)
    assert msgs[0].msg_type == messages.RUN_ACCEPTED and msgs[0].content["run_id"] == run_id
    assert msgs[-1].content["state"] == "FINISHED", msgs[-1].content
    assert open(marker).read() == "ran\n"
    os.remove(marker)
    wait_idle_workers_for(warm)

    before = rejected_count(warm)
    # The captured frames, replayed byte for byte: from the same connection, and from
    # a fresh one (an eavesdropper's).
    with dealer(zctx, address) as s:
        s.send_multipart(frames)
        assert sync(s, session) == []
    with dealer(zctx, address) as s:
        s.send_multipart(frames)
        assert sync(s, messages.Session(key)) == []
    assert rejected_count(warm) - before == 2
    time.sleep(1.0)
    assert not os.path.exists(marker), "a replayed submit_run ran again"
    states = [r["state"] for r in warm.status()["runs"] if r["run_id"] == run_id]
    assert states == ["FINISHED"]


def wait_idle_workers_for(client):
    wait_idle_workers(client, 4)


def head_still_works(client):
    assert client.ping(timeout=5.0)

    def f():
        ctx = raynb.get_context()
        raynb.report({"rank": ctx.get_world_rank(), "world": ctx.get_world_size()})
        return ctx.get_world_size()

    wait_idle_workers_for(client)
    result = raynb.TorchTrainer(
        f, scaling_config=raynb.ScalingConfig(num_workers=4), run_config=raynb.RunConfig(verbose=0)
    ).fit()
    assert result.state == "FINISHED"
    assert result.metrics["rank"] == 0 and result.metrics["world"] == 4


def head_port(client) -> tuple[str, int]:
    host, port = client.info["address"].removeprefix("tcp://").rsplit(":", 1)
    return host, int(port)


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Read (and discard) until the peer closes; False if it is still open after ``timeout``."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if sock.recv(65536) == b"":
                return True
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


def test_garbage_on_the_tcp_port_does_not_hurt_the_head(warm):
    host, port = head_port(warm)
    rng = random.Random(1234)
    # Idle connections that never finish a handshake stay open throughout.
    idle = [socket.create_connection((host, port)) for _ in range(8)]
    try:
        for n in (1, 10, 64, 4096, 65536):
            with socket.create_connection((host, port)) as s:
                s.sendall(rng.randbytes(n))
        with socket.create_connection((host, port)) as s:
            s.sendall(b"\xff" * 4096)  # a signature byte, then nonsense
        # A well-formed greeting, then garbage where the READY command belongs: the
        # head must hang up, not wait.
        with socket.create_connection((host, port)) as s:
            s.sendall(zmtp_greeting() + rng.randbytes(512))
            assert closed_by_peer(s, 5.0), "the head kept a connection after a bad handshake"
        # A greeting speaking an unknown security mechanism.
        with socket.create_connection((host, port)) as s:
            s.sendall(zmtp_greeting().replace(b"NULL", b"EVIL"))
            assert closed_by_peer(s, 5.0)
        # A client that vanishes mid-greeting.
        with socket.create_connection((host, port)) as s:
            s.sendall(zmtp_greeting()[:20])
        assert warm.ping(timeout=5.0)
    finally:
        for s in idle:
            s.close()
    head_still_works(warm)


@pytest.mark.parametrize("claimed", [messages.DEFAULT_MAX_MESSAGE_BYTES + 1, 8 << 30, (1 << 63) - 1])
def test_frame_claiming_more_than_the_limit_is_refused(warm, claimed):
    """A raw ZMTP frame header announcing a huge frame: ZeroMQ drops the connection
    at once (ZMQ_MAXMSGSIZE) instead of allocating and waiting for the bytes."""
    host, port = head_port(warm)
    with socket.create_connection((host, port)) as s:
        s.sendall(zmtp_greeting() + zmtp_ready(identity=b"client:huge"))
        s.sendall(bytes([0x02]) + struct.pack(">Q", claimed) + b"\x00" * 1024)
        assert closed_by_peer(s, 5.0), f"the head kept a connection announcing a {claimed}-byte frame"
    assert warm.ping(timeout=5.0)


def test_truncated_and_huge_messages_are_rejected(warm, zctx):
    address, key = warm.info["address"], warm.info["key"].encode()
    before = rejected_count(warm)
    good = raw(messages.Session(key).serialize(messages.STATUS_REQUEST))
    huge = os.urandom(1 << 16) * 1025  # 64 MiB + 64 KiB, one frame
    with dealer(zctx, address) as s:
        s.send_multipart([b"x"])
        s.send_multipart([b"a", b"b"])
        s.send_multipart(good[:2])  # a genuine message, cut short
        s.send_multipart([b""])
        replies = sync(s, messages.Session(key), timeout=30.0)
    assert replies == [], [m.msg_type for m in replies]
    assert rejected_count(warm) - before == 4
    # A frame over the frame limit never reaches the head to be counted: ZeroMQ drops
    # the connection at its header (ZMQ_MAXMSGSIZE), before buffering any of it (the
    # head's memory under such frames: tests/cluster/protocol/test_security.py). The peer's socket
    # connects again, and what it sends next is answered.
    with dealer(zctx, address) as s:
        s.send_multipart([huge])
        s.send_multipart([good[0], good[1], good[2], huge])  # genuine, plus an unsigned frame
        replies = sync(s, messages.Session(key), timeout=30.0)
    del huge
    assert replies == [], [m.msg_type for m in replies]
    assert rejected_count(warm) - before == 4
    head_still_works(warm)


def test_unauthenticated_peer_cannot_take_over_a_worker_route(warm, zctx):
    """Routing ids are not secret (workers are ``worker:<node>-w<n>``): a process that
    connects under a worker's id without the key must not receive that worker's
    tasks (the user's code and data), nor break the run."""
    address = warm.info["address"]
    victim = sorted(w["worker_id"] for w in warm.status()["workers"])[0]
    with (
        dealer(zctx, address, identity=f"worker:{victim}".encode()) as thief,
        dealer(zctx, address, identity=f"node:{warm.status()['nodes'][0]['node_id']}".encode()) as thief2,
    ):
        thief.send_multipart([b"hello"])
        thief2.send_multipart([b"hello"])
        time.sleep(0.3)  # the handshakes are done; a handover would have happened now

        def f():
            return raynb.get_context().get_world_rank()

        result = raynb.TorchTrainer(
            f,
            scaling_config=raynb.ScalingConfig(num_workers=4, timeout_s=5),
            run_config=raynb.RunConfig(verbose=0),
        ).fit()
        assert result.state == "FINISHED"
        assert not thief.poll(0), "the head sent a worker's task to an unauthenticated peer"
        assert not thief2.poll(0), "the head sent a node's command to an unauthenticated peer"
    head_still_works(warm)
