"""``ray.train.torch``'s small helpers and Ray 2.60's report keywords, in this process:
``TorchConfig`` checked and accepted, ``enable_reproducibility`` seeds and makes torch
deterministic, ``prepare_optimizer`` / ``backward``, ``CheckpointUploadMode`` and the
report keywords that are not metrics."""

from __future__ import annotations

import pytest
import torch

from raynb.train import CheckpointUploadMode
from raynb.train.report_options import take_ray_keywords
from raynb.train.torch import TorchConfig, backward, enable_reproducibility, prepare_optimizer


def test_torch_config_and_helpers():
    assert TorchConfig(backend="gloo", timeout_s=60).backend == "gloo"
    with pytest.raises(ValueError, match="backend"):
        TorchConfig(backend="mpi")
    with pytest.raises(ValueError, match="timeout_s"):
        TorchConfig(timeout_s=0)
    was = torch.are_deterministic_algorithms_enabled()
    try:
        enable_reproducibility(seed=3)
        a = torch.rand(3)
        enable_reproducibility(seed=3)
        assert torch.equal(a, torch.rand(3)) and torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(was)
    w = torch.ones(2, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    assert prepare_optimizer(opt) is opt
    backward((w * 2).sum())
    assert w.grad.tolist() == [2.0, 2.0]


def test_report_keywords_are_not_metrics():
    more = {"acc": 1.0, "checkpoint_upload_mode": CheckpointUploadMode.ASYNC, "checkpoint_dir_name": "x"}
    taken = take_ray_keywords(more)
    assert more == {"acc": 1.0} and set(taken) == {"checkpoint_upload_mode", "checkpoint_dir_name"}
    with pytest.raises(NotImplementedError, match="checkpoint_upload_fn"):
        take_ray_keywords({"checkpoint_upload_fn": lambda c, d: c})
    with pytest.raises(NotImplementedError, match="validation"):
        take_ray_keywords({"validation": True})
