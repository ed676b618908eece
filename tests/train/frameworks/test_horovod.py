"""Horovod's PyTorch API on raynb's warm ranks (HorovodTrainer): a Horovod-style training
script (hvd.init, DistributedOptimizer, broadcast_parameters, broadcast_optimizer_state)
ends with identical parameters equal to one process's full-batch training; the collectives
give Horovod's results; gradient accumulation and fp16 compression; a warm second fit is
not slower than the first (there is no framework to import)."""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest

from raynb.train import RunConfig, ScalingConfig
from raynb.train.horovod import HorovodConfig, HorovodTrainer

pytestmark = pytest.mark.horovod
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _data():
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 8, generator=g)
    return x, x @ torch.randn(8, 1, generator=g)


def _net():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _horovod_script(config):
    # As Horovod's own PyTorch examples: nothing raynb-specific below this import.
    import horovod.torch as hvd
    import torch

    hvd.init()
    x, y = _data()
    torch.manual_seed(hvd.rank() + 1)  # different inits: broadcast_parameters makes them rank 0's
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    if hvd.rank() == 0:
        model.load_state_dict(_net().state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size() / hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    opt = hvd.DistributedOptimizer(
        opt,
        named_parameters=model.named_parameters(),
        compression=getattr(hvd.Compression, config["compression"]),
        backward_passes_per_step=config["passes"],
    )
    n = len(x) // hvd.size()
    xs, ys = x[hvd.rank() * n : (hvd.rank() + 1) * n], y[hvd.rank() * n : (hvd.rank() + 1) * n]
    for _ in range(config["steps"]):
        chunk = n // config["passes"]
        for i in range(config["passes"]):
            loss = (
                torch.nn.functional.mse_loss(
                    model(xs[i * chunk : (i + 1) * chunk]), ys[i * chunk : (i + 1) * chunk]
                )
                / config["passes"]
            )
            loss.backward()
        opt.step()
        opt.zero_grad()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    every = hvd.allgather(flat.unsqueeze(0))
    return {
        "every": every.tolist(),
        "size": hvd.size(),
        "rank": hvd.rank(),
        "local_rank": hvd.local_rank(),
        "local_size": hvd.local_size(),
    }


def _single(steps):
    import torch

    x, y = _data()
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _run(tmp_path, fn=_horovod_script, workers=2, **config):
    from raynb.train.fit_run import execute_run

    cfg = {"compression": "none", "passes": 1, "steps": 20, **config}
    trainer = HorovodTrainer(
        fn,
        train_loop_config=cfg,
        horovod_config=HorovodConfig(),
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
    )
    return execute_run(
        trainer.train_loop_per_worker, trainer.train_loop_config, trainer.scaling_config, trainer.run_config
    )[1]


def test_warm_second_fit_is_not_slower_than_the_first(warm, tmp_path):
    t0 = time.perf_counter()
    _run(tmp_path / "a", workers=4, steps=2)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    _run(tmp_path / "b", workers=4, steps=2)
    second = time.perf_counter() - t0
    assert second < first * 1.5, (first, second)  # nothing to import: both warm; not slower


@pytest.mark.parametrize("compression,passes,tol", [("none", 1, 1e-5), ("none", 2, 1e-5), ("fp16", 1, 2e-2)])
def test_horovod_script_matches_full_batch_training(warm, tmp_path, compression, passes, tol):
    import torch

    value = _run(tmp_path, compression=compression, passes=passes)
    assert (value["size"], value["rank"], value["local_rank"], value["local_size"]) == (2, 0, 0, 2)
    every = torch.tensor(value["every"])
    assert torch.equal(every[0], every[1])  # identical on both ranks
    assert torch.allclose(every[0], _single(20), atol=tol), (every[0] - _single(20)).abs().max()


def _collectives(config):
    import horovod.torch as hvd
    import torch

    hvd.init()
    r = hvd.rank()
    t = torch.tensor([float(r + 1), 10.0 * (r + 1)])
    handle = hvd.allreduce_async(t, op=hvd.Sum)
    inplace = t.clone()
    hvd.allreduce_(inplace, op=hvd.Max)
    return {
        "avg": hvd.allreduce(t).tolist(),
        "sum": hvd.synchronize(handle).tolist(),
        "max": inplace.tolist(),
        "min": hvd.allreduce(t, op=hvd.Min).tolist(),
        "gather": hvd.allgather(torch.arange(r + 1)).tolist(),  # rows differ per rank
        "bcast": hvd.broadcast(t, root_rank=1).tolist(),
        "unchanged": t.tolist(),
        "obj": hvd.broadcast_object({"from": r}, root_rank=1),
        "objs": hvd.allgather_object(r * 2),
    }


def test_collectives_give_horovods_results(warm, tmp_path):
    v = _run(tmp_path, fn=_collectives)
    assert v["avg"] == [1.5, 15.0] and v["sum"] == [3.0, 30.0]
    assert v["max"] == [2.0, 20.0] and v["min"] == [1.0, 10.0]
    assert v["gather"] == [0, 0, 1] and v["bcast"] == [2.0, 20.0] and v["unchanged"] == [1.0, 10.0]
    assert v["obj"] == {"from": 1} and v["objs"] == [0, 2]


def test_horovod_is_not_left_importable_after_the_run(warm, tmp_path):
    def probe():
        import importlib.util

        return importlib.util.find_spec("horovod") is not None

    from raynb.train.torch import TorchTrainer

    _run(tmp_path / "a", steps=1)
    from raynb.train.fit_run import execute_run

    t = TorchTrainer(
        probe,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path / "b")),
    )
    assert execute_run(t.train_loop_per_worker, None, t.scaling_config, t.run_config)[1] is False
