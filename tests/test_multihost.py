"""Many machines, for real: a head, two node agents and a notebook client, each in a
network namespace of its own (``netns``), joined over a bridge on 198.18.0.0/24, with
CurveZMQ on every ZeroMQ link (the head listens off loopback). Skipped where
namespaces cannot be made (not root)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from multihost_fixture import three_hosts  # noqa: F401 - the module's cluster fixture

TRAIN_4 = """
    import torch
    import torch.distributed as dist
    from raynb import ScalingConfig, TorchTrainer
    from raynb.train import get_context, report
    from raynb.train.torch import prepare_model

    def loop():
        ctx = get_context()
        t = torch.tensor([float(ctx.get_world_rank() + 1)])
        dist.all_reduce(t)
        torch.manual_seed(ctx.get_world_rank())     # different initial weights: DDP must sync them
        model = prepare_model(torch.nn.Linear(8, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            x = torch.randn(16, 8)                  # different data on each rank
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        me = {"rank": ctx.get_world_rank(), "local_rank": ctx.get_local_rank(),
              "local_world_size": ctx.get_local_world_size(), "node_rank": ctx.get_node_rank(),
              "node_ip": os.environ.get("RAYNB_NODE_IP"), "gloo_if": os.environ.get("GLOO_SOCKET_IFNAME"),
              "params": flat.tolist()}
        everyone = [None] * ctx.get_world_size()
        dist.all_gather_object(everyone, me)
        report({"sum": t.item(), "ranks": json.dumps(everyone)})

    raynb.connect(KEY_FILE)
    r = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=4, placement_strategy=STRATEGY)).fit()
    print(json.dumps({"sum": r.metrics["sum"], "ranks": json.loads(r.metrics["ranks"])}))
"""


def test_start_prints_join_command_and_status_lists_nodes(three_hosts):
    c = three_hosts
    assert (f"raynb node --address {c.info['address']} --key-file {c.homes['head'] / 'cluster.json'}"
            in c.start_out), c.start_out
    assert c.info["address"].startswith("tcp://198.18.0.1:") and "server_secret" not in c.info["curve"]
    assert oct(os.stat(c.homes["head"] / "cluster.json").st_mode & 0o777) == "0o600"
    st = c.status()
    nodes = {n["node_id"]: n for n in st["nodes"]}
    assert set(nodes) == {"n1", "n2"}, nodes
    assert nodes["n1"]["ip"] == "198.18.0.2" and nodes["n2"]["ip"] == "198.18.0.3"
    assert nodes["n1"]["workers"] == 2 and nodes["n1"]["gpus"] == []
    assert st["curve"] is True
    _, r = c.client("from raynb.client.status import format_status\n"
                    "print(format_status(raynb.connect(KEY_FILE).status()))")
    assert "node n2 on" in r.stdout and "(198.18.0.3)" in r.stdout and "last heartbeat" in r.stdout, r.stdout


def test_start_refuses_an_address_the_machine_does_not_have(three_hosts):
    c = three_hosts
    r = c.net.run("h1", [sys.executable, "-m", "raynb.cli", "start", "--host", "198.18.0.77"],
                  env=c.env("h1"))
    assert r.returncode != 0
    assert "198.18.0.77 is not an address of this machine" in r.stderr and "eth0 198.18.0.2" in r.stderr, r.stderr


@pytest.mark.parametrize("strategy", ["SPREAD"])
def test_four_ranks_on_two_hosts_all_reduce_and_ddp(three_hosts, strategy):
    c = three_hosts
    out, r = c.client(f"STRATEGY = {strategy!r}\n" + textwrap.dedent(TRAIN_4), timeout=150)
    assert out["sum"] == 1 + 2 + 3 + 4, r.stdout
    ranks = sorted(out["ranks"], key=lambda x: x["rank"])
    assert [x["params"] for x in ranks] == [ranks[0]["params"]] * 4   # DDP: identical everywhere
    by_node = {}
    for x in ranks:
        by_node.setdefault(x["node_ip"], []).append(x)
    assert sorted(by_node) == ["198.18.0.2", "198.18.0.3"]
    for ip, xs in by_node.items():
        assert sorted(x["local_rank"] for x in xs) == [0, 1]
        assert {x["local_world_size"] for x in xs} == {2}
        assert len({x["node_rank"] for x in xs}) == 1
        assert {x["gloo_if"] for x in xs} == {"eth0"}   # gloo on the registered interface
    assert sorted({x["node_rank"] for x in ranks}) == [0, 1]
