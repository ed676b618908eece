"""``RAYNB_CLIENT_GRACE_S``: how long another client's last use keeps a script's cluster,
asked to stop once idle, up (raynb/cluster/head/idle_stop.py); read when the head starts."""

from __future__ import annotations

from raynb.cluster.head.idle_stop import CLIENT_GRACE_S, IdleStop


def _in_use_after(seconds: float) -> str | None:
    stop = IdleStop()
    stop.ask({b"owner"})
    stop.client_heard(b"other", 100.0)
    return stop.in_use([], 0, 100.0 + seconds)


def test_another_clients_use_keeps_the_cluster_up_for_the_default_grace(monkeypatch):
    monkeypatch.delenv("RAYNB_CLIENT_GRACE_S", raising=False)
    assert CLIENT_GRACE_S == 10.0
    assert _in_use_after(CLIENT_GRACE_S - 0.5) == "1 other client(s) connected in the last 10s"
    assert _in_use_after(CLIENT_GRACE_S + 0.5) is None


def test_the_grace_follows_the_setting(monkeypatch):
    monkeypatch.setenv("RAYNB_CLIENT_GRACE_S", "2.5")
    assert _in_use_after(2.0) == "1 other client(s) connected in the last 2.5s"
    assert _in_use_after(3.0) is None
    monkeypatch.setenv("RAYNB_CLIENT_GRACE_S", "-1")  # does not parse: the default
    assert _in_use_after(CLIENT_GRACE_S - 0.5) is not None
