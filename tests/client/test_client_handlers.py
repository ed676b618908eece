"""The notebook's client dispatches what it receives unasked through one handler table
(``raynb/client/handlers.py``), as the head, the node agent and the worker do: every message
the catalog sends a client has exactly one handler there, the run messages reach whoever
follows runs on the connection (a fit's follow loop, Tune's controller), and no other
module reads those message types on its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import zmq

import raynb
from raynb.client import followers, handlers
from raynb.client.submit_and_follow import RunFollower
from raynb.cluster.protocol import catalog, control, messages
from raynb.cluster.protocol.declaration import CLIENT, received_by
from raynb.tune.controller import TuneController

KEY = b"k" * 32
PACKAGE = Path(raynb.__file__).parent


def test_the_client_has_one_handler_for_each_message_it_receives_and_none_other():
    receives = received_by(catalog.MESSAGES, CLIENT)
    missing, stray = sorted(receives - set(handlers.HANDLERS)), sorted(set(handlers.HANDLERS) - receives)
    assert not missing, f"a client receives {missing} (catalog.py) but its handler table has no entry"
    assert not stray, f"the client's handler table answers {stray}, which the catalog never sends it"
    # the rest of what reaches a client is a reply its request reads, or taken apart first
    rest = received_by(catalog.MESSAGES, CLIENT, dispatched=False) - receives
    replies = {m.name for m in catalog.MESSAGES for r in m.routes if r.receiver == CLIENT and r.reply}
    assert rest - replies == {messages.RUN_EVENTS, messages.CHUNK}


def test_every_connection_has_the_client_table_bound_to_functions():
    assert control.Client.handlers.keys() == handlers.HANDLERS.keys()
    assert all(callable(h) for h in control.Client.handlers.values())
    assert handlers.bound().keys() == handlers.HANDLERS.keys()


def test_every_follower_answers_each_run_message_the_table_hands_to_followers():
    to_followers = {p.split(".", 1)[1] for p in handlers.HANDLERS.values() if p.startswith("followers.")}
    assert to_followers == set(followers.FOLLOWER_METHODS)
    for cls in (RunFollower, TuneController, type(followers.NOBODY)):
        for name in followers.FOLLOWER_METHODS:
            assert callable(getattr(cls, name, None)), f"{cls.__name__}.{name} is missing"


def _reads_of(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines comparing a ``msg_type`` with ``messages.X`` (X one of ``names``)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        parts = [node.left, *node.comparators]
        reads_type = any(isinstance(p, ast.Attribute) and p.attr == "msg_type" for p in parts)
        consts = [e for p in parts for e in (p.elts if isinstance(p, (ast.Tuple, ast.Set)) else [p])]
        if reads_type and any(isinstance(c, ast.Attribute) and c.attr in names for c in consts):
            lines.append(node.lineno)
    return lines


def test_no_module_of_the_kernel_side_reads_a_dispatched_message_type_itself():
    # the cluster's own modules (its processes' tables, the connection's expansion) are
    # not the client's; everything above them runs in the kernel
    names = {m.constant for m in catalog.MESSAGES if m.name in handlers.HANDLERS}
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "cluster" in path.relative_to(PACKAGE).parts:
            continue
        lines = _reads_of(ast.parse(path.read_text()), names)
        if lines:
            found[str(path.relative_to(PACKAGE))] = lines
    assert not found, f"read outside the client's handler table (client/handlers.py): {found}"


class _Recorder:
    def __init__(self):
        self.got: list[tuple] = []

    def on_run_event(self, msg):
        self.got.append(("event", msg.content["event"]["n"]))

    def on_run_done(self, msg):
        self.got.append(("done", msg.content["state"]))

    def on_run_record(self, msg):
        self.got.append(("record", msg.content["record"]["run_id"]))


@pytest.fixture
def head_socket():
    """A ROUTER on loopback speaking the signed protocol, and a client connected to it."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    client = control.Client(f"tcp://127.0.0.1:{port}", KEY)
    session = messages.Session(KEY)
    client.send(messages.PING)
    assert router.poll(5000)
    identity = router.recv_multipart()[0]
    try:
        yield client, lambda *a, **kw: session.send(router, *a, identity=identity, **kw)
    finally:
        client.close()
        router.close(0)
        ctx.term()


def test_a_connection_hands_its_follower_the_run_messages_in_the_order_sent(head_socket):
    client, send = head_socket
    follower = _Recorder()
    event = lambda n: {"run_id": "r", "event": {"kind": "note", "n": n}}  # noqa: E731
    send(messages.RUN_EVENT, event(0))
    send(messages.RUN_EVENTS, {"events": [event(1), event(2)]})
    send(messages.RUN_RECORD, {"record": {"run_id": "r"}})
    send(messages.RUN_DONE, {"run_id": "r", "state": "FINISHED", "events": [event(3)]})
    with followers.following(client, follower):
        seen = [client.recv(5.0).msg_type for _ in range(6)]
    assert follower.got == [
        ("event", 0),
        ("event", 1),
        ("event", 2),
        ("record", "r"),
        ("event", 3),
        ("done", "FINISHED"),
    ]
    # each is still returned to the loop that waits: the head was heard from
    assert seen == [messages.RUN_EVENT] * 3 + [messages.RUN_RECORD, messages.RUN_EVENT, messages.RUN_DONE]
    # nobody follows now: a run's messages are dropped, and still returned
    send(messages.RUN_EVENT, event(4))
    assert client.recv(5.0).msg_type == messages.RUN_EVENT and len(follower.got) == 6
