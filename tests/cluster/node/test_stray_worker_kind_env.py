"""A node started in an environment that holds RAYNB_WORKER_KIND (a parent's, copied into a
shell) still forks torch workers from its torch zygote: its workers said that kind, and
every torch run waited PENDING for good."""

from __future__ import annotations

import sys

import cloudpickle
import pytest
from conftest import private_cluster

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _report(config):
    from raynb import train

    train.report({"done": 1})


@pytest.mark.timeout(120)
def test_a_stray_worker_kind_in_the_nodes_environment_is_not_its_workers(tmp_path, monkeypatch):
    from raynb.train import RunConfig, ScalingConfig
    from raynb.train.torch import TorchTrainer

    with private_cluster(tmp_path, monkeypatch, workers=1, env={"RAYNB_WORKER_KIND": "jax"}) as (
        _,
        client,
        _,
    ):
        result = TorchTrainer(
            _report, scaling_config=ScalingConfig(num_workers=1), run_config=RunConfig(name="stray-kind")
        ).fit()
        assert result.metrics["done"] == 1
        kinds = {w.get("kind") for w in client.status()["workers"]}
        assert kinds == {"torch"}, kinds
