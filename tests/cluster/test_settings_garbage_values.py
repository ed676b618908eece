"""Settings from the environment with garbage values (NaN, negative, infinite, huge, not
a number): every reader gets the default, never NaN's quiet zero (a data wait of 0.1 s,
a node lost after 1 s, callbacks not drained) nor an infinity a wait cannot take; and the
process says once which value it ignored."""

from __future__ import annotations

import threading

import pytest

from raynb.client.refollow import reconnect_s
from raynb.cluster import settings
from raynb.cluster.head.data_gate import data_wait_s
from raynb.cluster.head.node_events import remote_node_timeout_s
from raynb.cluster.head.queue import replacement_wait_s
from raynb.cluster.protocol.messages import max_message_bytes
from raynb.train.callback_list import drain_timeout_s

READERS = [
    ("RAYNB_DATA_WAIT_S", data_wait_s, 120.0),
    ("RAYNB_NODE_TIMEOUT_S", remote_node_timeout_s, 5.0),
    ("RAYNB_REPLACEMENT_WAIT_S", replacement_wait_s, 300.0),
    ("RAYNB_CALLBACK_DRAIN_S", drain_timeout_s, 30.0),
    ("RAYNB_CLIENT_RECONNECT_S", reconnect_s, 600.0),
    ("RAYNB_CLIENT_GRACE_S", lambda: settings.get("RAYNB_CLIENT_GRACE_S"), 10.0),
    ("RAYNB_HEAD_GRACE_S", lambda: settings.get("RAYNB_HEAD_GRACE_S"), 60.0),
]


@pytest.mark.parametrize("raw", ["nan", "-1", "inf", "1e400", "1e300", "abc"])
@pytest.mark.parametrize("name,reader,default", READERS, ids=[r[0] for r in READERS])
def test_a_garbage_number_of_seconds_is_the_default(monkeypatch, name, reader, default, raw):
    monkeypatch.setenv(name, raw)
    assert reader() == default


def test_a_good_value_is_used(monkeypatch):
    monkeypatch.setenv("RAYNB_DATA_WAIT_S", "7.5")
    assert data_wait_s() == 7.5
    monkeypatch.setenv("RAYNB_REPLACEMENT_WAIT_S", "0")
    assert replacement_wait_s() == 0.0


@pytest.mark.parametrize("raw", ["-1", "0", "nan", "abc"])
def test_a_garbage_message_limit_is_the_default(monkeypatch, raw):
    monkeypatch.setenv("RAYNB_MAX_MESSAGE_BYTES", raw)
    assert max_message_bytes() == 2**30


def test_an_infinite_drain_is_one_a_wait_can_take(monkeypatch):
    monkeypatch.setenv("RAYNB_CALLBACK_DRAIN_S", "inf")
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join(drain_timeout_s())  # was OverflowError: timeout value is too large


def test_an_ignored_value_is_said_once(monkeypatch, capsys):
    monkeypatch.setenv("RAYNB_DATA_WAIT_S", "12s")
    data_wait_s()
    data_wait_s()
    err = capsys.readouterr().err
    assert err.count("RAYNB_DATA_WAIT_S='12s' is not a valid value") == 1, err
    assert "using the default 120.0" in err and "docs/environment.md" in err
