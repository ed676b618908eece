"""A run asking for a kind of worker no node starts is refused at submit, naming the
kinds there are (it waited PENDING for good: the node agent forks torch workers for an
unknown kind, and the head waited for workers of that kind)."""

from __future__ import annotations

import time

import pytest

import raynb.client.submit_and_follow as submit_and_follow
from raynb.cluster.head import scheduler
from raynb.cluster.node.kind_zygote import KINDS


def test_the_heads_kinds_are_the_nodes():
    assert scheduler.KINDS == KINDS


def test_a_run_of_an_unknown_worker_kind_is_refused_at_submit(cluster, monkeypatch):
    from raynb.train import RunConfig, ScalingConfig
    from raynb.train.torch import TorchTrainer

    monkeypatch.setitem(submit_and_follow.WORKER_KINDS, "TorchTrainer", "jax")

    def fn(config):
        pass

    trainer = TorchTrainer(
        fn, scaling_config=ScalingConfig(num_workers=1), run_config=RunConfig(name="kind-jax")
    )
    t0 = time.monotonic()
    with pytest.raises(Exception, match=r"worker_kind='jax'.*torch, tensorflow.*TensorflowTrainer") as info:
        trainer.fit()
    assert time.monotonic() - t0 < 20, "the refusal came late"
    assert "ran" not in str(info.value)
