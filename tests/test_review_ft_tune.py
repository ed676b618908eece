"""Adversarial review of checkpoints / fault tolerance (issue 3) and Tune (issue 4):
each test here failed before the fix it comes with. Real cluster, real processes.
"""
from __future__ import annotations

import os
import sys
import time

import cloudpickle
import pytest

import raynb
from raynb import protocol as P
from raynb.runner import build_submission
from raynb.train import FailureConfig, RunConfig, ScalingConfig

from conftest import wait_idle_workers

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _submit(client, fn, config=None, workers=2, **rc):
    spec, payload = build_submission(fn, config, ScalingConfig(num_workers=workers),
                                     RunConfig(verbose=0, **rc))
    reply = client.request(P.SUBMIT_RUN, spec, reply_types=(P.RUN_ACCEPTED,), buffers=[payload])
    assert reply.msg_type == P.RUN_ACCEPTED, reply.content
    return spec["run_id"], reply.content


def _wait_for(client, run_id, pred, timeout):
    """Messages of ``run_id`` until ``pred(msg)`` holds; returns that message (or None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = client.recv(0.1)
        if msg is not None and msg.content.get("run_id") == run_id and pred(msg):
            return msg
    return None


def _fails_then_runs_long(config):
    """Attempt 0: rank 1 raises while rank 0 ignores the cancel for a while (it is
    killed after the grace period). Later attempts run long."""
    import time

    from raynb.train import get_context
    from raynb.train import session

    rank = get_context().get_world_rank()
    if session._task["attempt"] == 0:
        if rank == 1:
            time.sleep(0.2)
            raise ValueError("boom")
        end = time.time() + 5
        while time.time() < end:
            try:
                time.sleep(0.05)
            except KeyboardInterrupt:
                pass
        return
    time.sleep(30)


def test_cancel_while_failing_is_not_lost(warm):
    """A cancel (notebook interrupt, Tune STOP) that reaches the head while a run is
    FAILING (between a rank's failure and the restart) must end the run CANCELLED,
    not be dropped and let the run restart."""
    client = warm
    run_id, _ = _submit(client, _fails_then_runs_long, failure_config=FailureConfig(2))
    first_error = _wait_for(client, run_id, lambda m: m.msg_type == P.RUN_EVENT
                            and m.content["event"].get("kind") == "state", 5)
    assert first_error is not None
    # rank 1 raises at ~0.2 s; rank 0 holds the run in FAILING for the 1 s grace.
    time.sleep(0.5)
    st = {r["run_id"]: r["state"] for r in client.status()["runs"]}
    assert st[run_id] == "FAILING", st[run_id]
    client.send(P.CANCEL_RUN, {"run_id": run_id})
    done = _wait_for(client, run_id, lambda m: m.msg_type == P.RUN_DONE, 5)
    st = {r["run_id"]: r["state"] for r in client.status()["runs"]}
    if done is None:
        client.send(P.CANCEL_RUN, {"run_id": run_id})  # clean up the restarted run
        _wait_for(client, run_id, lambda m: m.msg_type == P.RUN_DONE, 5)
    assert done is not None, f"the cancel was dropped: the run is {st[run_id]} again"
    assert done.content["state"] == "CANCELLED"
    wait_idle_workers(client, 4)
