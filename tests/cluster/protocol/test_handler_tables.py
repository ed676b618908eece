"""Each process dispatches through one handler table, checked against the protocol's one
declaration of its messages (``raynb/cluster/protocol/catalog.py``): every message the
catalog says a process receives has exactly one handler there, and no handler is for a
message it never receives."""

from __future__ import annotations

import pytest

from raynb.client.handlers import HANDLERS as CLIENT_HANDLERS
from raynb.cluster.head.handlers import HANDLERS as HEAD_HANDLERS
from raynb.cluster.node import agent
from raynb.cluster.protocol import catalog, messages
from raynb.cluster.protocol.declaration import CLIENT, HEAD, NODE, ROLES, WORKER, received_by
from raynb.cluster.worker import task_loop

TABLES = {HEAD: HEAD_HANDLERS, NODE: agent.HANDLERS, WORKER: task_loop.HANDLERS, CLIENT: CLIENT_HANDLERS}


@pytest.mark.parametrize("role", sorted(TABLES))
def test_a_process_has_one_handler_for_each_message_it_receives_and_none_other(role):
    table, receives = TABLES[role], received_by(catalog.MESSAGES, role)
    missing, stray = sorted(receives - set(table)), sorted(set(table) - receives)
    assert not missing, f"the {role} receives {missing} (catalog.py) but its handler table has no entry"
    assert not stray, f"the {role}'s handler table answers {stray}, which the catalog never sends it"


def test_every_handler_table_names_declared_messages_only():
    for role, table in TABLES.items():
        assert set(table) <= messages.MESSAGE_TYPES, (role, set(table) - messages.MESSAGE_TYPES)
    # a client's replies are read where its request waits (control.request); what it gets
    # unasked goes through its table (tests/client/test_client_handlers.py)
    assert received_by(catalog.MESSAGES, CLIENT, dispatched=False) >= {
        messages.RUN_DONE,
        messages.RUN_EVENT,
        messages.DATA_NEEDED,
    }


def test_the_node_agent_takes_from_its_data_socket_exactly_what_the_catalog_sends_there():
    data = {m.name for m in catalog.MESSAGES for r in m.routes if r.receiver == NODE and r.socket == "data"}
    assert agent.DATA_SOCKET_TYPES == data


def test_the_node_and_worker_tables_name_real_methods():
    for cls, table in ((agent.NodeAgent, agent.HANDLERS), (task_loop.Worker, task_loop.HANDLERS)):
        for msg_type, path in table.items():
            first, _, rest = path.partition(".")
            if rest:  # an attribute set in __init__ (the node's data server): checked below
                continue
            assert callable(getattr(cls, first, None)), (
                f"{cls.__name__}.{path} (for {msg_type}) is not a method"
            )
    from raynb.cluster.node.data_server import DataServer

    assert callable(DataServer.on_put) and agent.HANDLERS[messages.DATA_PUT] == "data.on_put"


@pytest.mark.cluster
def test_a_head_binds_every_entry_of_its_table_to_a_method():
    from raynb.cluster.head.server import Head

    head = Head(messages.new_key(), "127.0.0.1", 0, num_workers=0)
    try:
        assert set(head.handlers) == set(HEAD_HANDLERS)
        assert all(callable(h) for h in head.handlers.values())
    finally:
        head.close()


def test_each_message_is_declared_once_with_a_doc_a_version_and_known_roles():
    versions = [v for v, _ in catalog.VERSIONS]
    names = [m.name for m in catalog.MESSAGES]
    assert len(names) == len(set(names)) == len(messages.MESSAGE_TYPES)
    for m in catalog.MESSAGES:
        assert m.doc and m.routes and m.topic, m.name
        assert m.since in versions and all(v in versions for v, _ in m.changes), m.name
        assert all(r.sender in ROLES and r.receiver in ROLES for r in m.routes), m.name
        fields = [f.name for f in m.fields]
        assert len(fields) == len(set(fields)), (m.name, fields)
        assert all(f.doc for f in m.fields), m.name
        assert getattr(messages, m.constant) == m.name
        assert (m.name in messages.SCHEMAS) == m.checked, m.name


def test_run_done_declares_the_errors_the_head_sends():
    run_done = next(m for m in catalog.MESSAGES if m.name == messages.RUN_DONE)
    fields = {f.name for f in run_done.fields}
    assert "errors" in fields and "error" not in fields
    assert (
        messages.SCHEMAS[messages.RUN_DONE].problem({"run_id": "r", "state": "FAILED", "errors": "x"})
        is not None
    )


def test_a_head_answers_node_lost_and_list_jobs_through_its_table(cluster):
    # node_lost and the jobs' messages were patched into the table by the head's main;
    # a head's own table now holds them.
    reply = cluster.request(
        messages.NODE_LOST,
        {"node_id": "no-such-node", "reason": "a test"},
        reply_types=(messages.NODE_LOST_REPLY,),
    )
    assert reply.msg_type == messages.NODE_LOST_REPLY and reply.content == {"known": False}
    reply = cluster.request(messages.LIST_JOBS, {}, reply_types=(messages.JOBS_REPLY,))
    assert reply.msg_type == messages.JOBS_REPLY and isinstance(reply.content["jobs"], list)
