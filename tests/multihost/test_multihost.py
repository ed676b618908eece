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
from support.multihost_fixture import LONG_RUN, three_hosts  # noqa: F401 - the module's cluster fixture

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
        model = prepare_model(torch.nn.Linear(8, 2), gradient_compression=COMPRESSION)
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
              "params": flat.tolist(), "hook": model._get_ddp_logging_data().get("comm_hook")}
        everyone = [None] * ctx.get_world_size()
        dist.all_gather_object(everyone, me)
        report({"sum": t.item(), "ranks": json.dumps(everyone)})

    raynb.connect(KEY_FILE)
    r = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=4, placement_strategy=STRATEGY)).fit()
    print(json.dumps({"sum": r.metrics["sum"], "ranks": json.loads(r.metrics["ranks"])}))
"""


def test_start_prints_join_command_and_status_lists_nodes(three_hosts):
    c = three_hosts
    assert (
        f"raynb node --address {c.info['address']} --key-file {c.homes['head'] / 'cluster.json'}"
        in c.start_out
    ), c.start_out
    assert c.info["address"].startswith("tcp://198.18.0.1:") and "server_secret" not in c.info["curve"]
    assert oct(os.stat(c.homes["head"] / "cluster.json").st_mode & 0o777) == "0o600"
    st = c.status()
    nodes = {n["node_id"]: n for n in st["nodes"]}
    assert set(nodes) == {"n1", "n2"}, nodes
    assert nodes["n1"]["ip"] == "198.18.0.2" and nodes["n2"]["ip"] == "198.18.0.3"
    assert nodes["n1"]["workers"] == 2 and nodes["n1"]["gpus"] == []
    assert st["curve"] is True
    _, r = c.client(
        "from raynb.client.status import format_status\n"
        "print(format_status(raynb.connect(KEY_FILE).status()))"
    )
    assert "node n2 on" in r.stdout and "(198.18.0.3)" in r.stdout and "last heartbeat" in r.stdout, r.stdout


def test_start_refuses_an_address_the_machine_does_not_have(three_hosts):
    c = three_hosts
    r = c.net.run(
        "h1", [sys.executable, "-m", "raynb.cli", "start", "--host", "198.18.0.77"], env=c.env("h1")
    )
    assert r.returncode != 0
    assert "198.18.0.77 is not an address of this machine" in r.stderr and "eth0 198.18.0.2" in r.stderr, (
        r.stderr
    )


@pytest.mark.parametrize("strategy,compression", [("SPREAD", None), ("PACK", "fp16")])
def test_four_ranks_on_two_hosts_all_reduce_and_ddp(three_hosts, strategy, compression):
    """4 ranks, 2 per host: the all-reduce sums over all, DDP leaves identical parameters on
    every rank (also with fp16 gradient compression), node and local ranks are right."""
    c = three_hosts
    out, r = c.client(
        f"STRATEGY, COMPRESSION = {strategy!r}, {compression!r}\n" + textwrap.dedent(TRAIN_4), timeout=150
    )
    assert out["sum"] == 1 + 2 + 3 + 4, r.stdout
    ranks = sorted(out["ranks"], key=lambda x: x["rank"])
    assert [x["params"] for x in ranks] == [ranks[0]["params"]] * 4  # DDP: identical everywhere
    by_node = {}
    for x in ranks:
        by_node.setdefault(x["node_ip"], []).append(x)
    assert sorted(by_node) == ["198.18.0.2", "198.18.0.3"]
    for ip, xs in by_node.items():
        assert sorted(x["local_rank"] for x in xs) == [0, 1]
        assert {x["local_world_size"] for x in xs} == {2}
        assert len({x["node_rank"] for x in xs}) == 1
        assert {x["gloo_if"] for x in xs} == {"eth0"}  # gloo on the registered interface
    assert sorted({x["node_rank"] for x in ranks}) == [0, 1]
    assert {x["hook"] for x in ranks} == ({"fp16_compress_hook"} if compression else {None}), ranks[0]["hook"]


BAD_CLIENT = """
    import zmq
    from raynb.cluster.connection_file import read_connection_file, write_connection_file
    info = read_connection_file(KEY_FILE)
    if MODE == "wrong_curve":
        pub, sec = zmq.curve_keypair()          # a keypair the head does not know
        info["curve"] = {**info["curve"], "client_public": pub.decode(), "client_secret": sec.decode()}
    elif MODE == "no_curve":
        info.pop("curve")
    path = os.path.join(os.environ["RAYNB_HOME"], MODE + ".json")
    write_connection_file(info, path)
    from raynb import ScalingConfig, TorchTrainer
    try:
        raynb.connect(path)
        TorchTrainer(lambda: open("/tmp/should-never-exist", "w"), scaling_config=ScalingConfig(num_workers=1)).fit()
        print(json.dumps({"outcome": "ran"}))
    except raynb.ClusterError as e:
        print(json.dumps({"outcome": "refused", "message": str(e)}))
"""


@pytest.mark.parametrize("mode", ["wrong_curve", "no_curve"])
def test_client_without_the_right_curve_keys_is_refused_and_nothing_runs(three_hosts, mode):
    c = three_hosts
    before = c.status()
    out, r = c.client(f"MODE = {mode!r}\n" + textwrap.dedent(BAD_CLIENT), timeout=60)
    assert out["outcome"] == "refused", r.stdout
    # A key the head does not know fails the CurveZMQ handshake, which the client names;
    # a client without Curve keys is told the head needs them, and where they are.
    assert ("CurveZMQ handshake" if mode == "wrong_curve" else "no Curve keys") in out["message"]
    after = c.status()
    assert after["rejected_connections"] > before["rejected_connections"]  # counted by the head
    assert len(after["runs"]) == len(before["runs"])  # nothing ran


def _node_refused(c, script_prelude: str, node_id: str) -> subprocess.CompletedProcess:
    code = (
        script_prelude + "\nfrom raynb.cluster.launch.static import run_node\n"
        f"sys.exit(run_node({c.info['address']!r}, {str(c.key_file('h1'))!r}, 0, node_id={node_id!r}))"
    )
    return c.net.run("h1", [sys.executable, "-c", code], env=c.env("h1"), timeout=60)


def test_node_with_a_wrong_key_or_protocol_version_is_refused_naming_which(three_hosts):
    c = three_hosts
    wrong_key = (
        "import sys, raynb.cluster.connection_file as C\n"
        "orig = C.read_connection_file\n"
        "C.read_connection_file = lambda p=None: {**orig(p), 'key': 'f' * 64}\n"
        "import raynb.cluster.launch.static as S; S.read_connection_file = C.read_connection_file"
    )
    r = _node_refused(c, wrong_key, "bad-key")
    assert r.returncode == 3, r.stderr[-2000:]
    assert "wrong cluster key" in r.stderr
    version = "import sys, raynb.cluster.protocol.messages as P\nP.PROTOCOL_VERSION = '9.0'"
    r = _node_refused(c, version, "bad-version")
    assert r.returncode == 3, r.stderr[-2000:]
    from raynb.cluster.protocol.messages import PROTOCOL_VERSION  # the head's

    assert f"protocol version '9.0' does not match '{PROTOCOL_VERSION}'" in r.stderr
    # Refusals are logged once every few seconds: the second may wait for the next line.
    deadline = time.monotonic() + 15
    while True:
        head_log = (c.homes["head"] / "logs" / "head.log").read_text()
        if (
            "wrong cluster key" in head_log and "protocol version '9.0'" in head_log
        ) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert "wrong cluster key" in head_log and "protocol version '9.0'" in head_log
    assert {n["node_id"] for n in c.status()["nodes"]} == {"n1", "n2"}


def _reports(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "result.json").read_text().splitlines() if line.strip()]


def test_losing_a_host_restarts_on_the_other_from_the_latest_checkpoint(three_hosts):
    c = three_hosts
    c.wait_workers(4)
    name = "lose-h2"
    code = f"EPOCHS, EPOCH_S, NAME = 8, 0.5, {name!r}\n" + textwrap.dedent(LONG_RUN)
    run_dir = c.storage / name
    client = c.net.popen(
        "client",
        [sys.executable, "-c", c.client_prelude() + code],
        env=c.env("client"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 90
    while not (run_dir / "checkpoint_000002").is_dir():
        assert time.monotonic() < deadline and client.poll() is None, client.communicate()
        time.sleep(0.05)
    killed = c.net.kill_all("h2")  # the host dies: its agent, zygote and workers at once
    lost_at = time.monotonic()
    assert killed and not c.net.wait_empty("h2")
    out, err = client.communicate(timeout=120)
    result = json.loads([x for x in out.splitlines() if x.startswith("{")][-1])
    assert result["error"] is None, out + err
    assert "restart 1/3: node n2 lost (rank " in out and "; resuming from checkpoint_" in out, out
    live_notes = [x for x in out.splitlines() if "] note: " in x and "restart 1/3" in x]
    assert len(live_notes) == 1, out  # one note per node loss
    reports = _reports(run_dir)
    epochs = [r["epoch"] for r in reports]
    restart = next(i for i, r in enumerate(reports) if r["start"] > 0)
    resumed_from = reports[restart]["start"] - 1  # the checkpoint the new attempt loaded
    assert sorted(set(epochs)) == list(range(8)), epochs  # none lost
    assert [e for e in epochs if e <= resumed_from] == list(range(resumed_from + 1)), epochs  # none repeated
    assert resumed_from >= 2  # the latest one, at least
    assert {r["host"] for r in reports[restart:]} == {"198.18.0.2"}  # all on h1 now
    assert time.monotonic() - lost_at < 60
    # Rank 0 was on a node without the run's storage: its checkpoints were streamed to the
    # head (and back to the restarted ranks, also on such a node), committed as any.
    transfers = c.status()["checkpoint_transfers"]
    assert transfers["files_in"] >= 8 and transfers["bytes_out"] > 0, transfers
    import torch

    assert torch.load(os.path.join(result["checkpoint"], "state.pt"))["epoch"] == 7
    assert not list(run_dir.glob(".staging/*/.tmp_*"))


def test_a_node_joining_late_is_used_by_the_next_run(three_hosts):
    """After h2's loss, a new agent n3 starts there: the next SPREAD run uses it."""
    c = three_hosts
    c.start_node("h2", "n3")
    c.wait_workers(2, nodes={"n3"})
    out, r = c.client("STRATEGY, COMPRESSION = 'SPREAD', None\n" + textwrap.dedent(TRAIN_4), timeout=150)
    assert out["sum"] == 10
    assert sorted({x["node_ip"] for x in out["ranks"]}) == ["198.18.0.2", "198.18.0.3"], out["ranks"]


SLEEPY_RUN = """
    from raynb import RunConfig, ScalingConfig, TorchTrainer
    from raynb.train import report

    def loop():
        for epoch in range(EPOCHS):
            time.sleep(1.0)
            report({"epoch": epoch})

    raynb.connect(ADDRESS, key_file=KEY_FILE)     # the tcp:// form, with the copied key file
    r = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(name=NAME)).fit()
    print(json.dumps({"error": None if r.error is None else str(r.error),
                      "epochs": [int(e) for e in r.metrics_dataframe["epoch"]]}))
"""


def test_the_notebook_survives_its_laptop_sleeping(three_hosts):
    """The client's link is down for 12 s mid-run (longer than its 10 s silence limit):
    it re-attaches with a fresh socket and follows the run to its end."""
    c = three_hosts
    name = "sleepy"
    code = f"EPOCHS, NAME = 16, {name!r}\n" + textwrap.dedent(SLEEPY_RUN)
    client = c.net.popen(
        "client",
        [sys.executable, "-c", c.client_prelude() + code],
        env=c.env("client"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    result_file = c.storage / name / "result.json"
    deadline = time.monotonic() + 60
    while not (result_file.exists() and len(result_file.read_text().splitlines()) >= 2):
        assert time.monotonic() < deadline and client.poll() is None, client.communicate()
        time.sleep(0.05)
    c.net.link("client", up=False)
    time.sleep(12)
    c.net.link("client", up=True)
    out, err = client.communicate(timeout=90)
    assert client.returncode == 0, out + err
    result = json.loads([x for x in out.splitlines() if x.startswith("{")][-1])
    assert result["error"] is None and result["epochs"] == list(range(16)), out


def test_a_node_that_loses_the_head_reconnects_within_the_grace(three_hosts):
    """h1's link is down 6 s: n1 gives up on the head after 4 s, ends its workers, and
    registers again once the link is back; its workers are used again."""
    c = three_hosts
    c.net.link("h1", up=False)
    time.sleep(6)
    c.net.link("h1", up=True)
    st = c.wait_workers(2, nodes={"n1"}, timeout=60)
    assert "n1" in {n["node_id"] for n in st["nodes"]}
    log = c.node_log("n1")
    assert "registering again" in log and "reconnected to the head" in log, log[-2000:]
    assert c.nodes["n1"].poll() is None


def test_node_agents_reconnect_to_a_restarted_head_with_the_same_keys(three_hosts):
    """The head's host dies and comes back (same address, same `raynb keygen` keys): the
    node agents, which lost it, register again within their grace and their workers serve."""
    c = three_hosts
    port = int(c.info["address"].rsplit(":", 1)[1])
    c.net.kill_all("head")
    assert not c.net.wait_empty("head")
    time.sleep(1)
    c.start(port=port)
    st = c.wait_workers(4, timeout=60)
    assert {n["node_id"] for n in st["nodes"]} == {"n1", "n3"}
    assert all(c.nodes[n].poll() is None for n in ("n1", "n3"))


UNWRITABLE = """
    import tempfile
    from raynb import Checkpoint, RunConfig, ScalingConfig, TorchTrainer
    from raynb.train import report

    def loop():
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "w.txt"), "w").write("x")
            report({"epoch": 0}, checkpoint=Checkpoint.from_directory(d))

    raynb.connect(KEY_FILE)
    try:
        TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=1),
                     run_config=RunConfig(name="unwritable")).fit()
        print(json.dumps({"error": None}))
    except raynb.RunError as e:
        print(json.dumps({"error": str(e)}))
"""


def test_a_shared_storage_node_that_cannot_write_it_fails_the_first_checkpoint(three_hosts):
    """n5 says it mounts the head's storage (--shared-storage) but sees it read-only (a
    mount namespace of its own): the first checkpoint fails, naming the node and path."""
    c = three_hosts
    c.wait_workers(4)
    node = [
        sys.executable,
        "-m",
        "raynb.cli",
        "node",
        "--address",
        c.info["address"],
        "--key-file",
        str(c.key_file("h1")),
        "--workers",
        "3",
        "--node-id",
        "n5",
        "--shared-storage",
    ]
    script = (
        f"mount --bind {c.storage} {c.storage} && mount -o remount,bind,ro {c.storage} && "
        f"exec {' '.join(node)}"
    )
    log = open(c.base / "node-n5.log", "ab")
    c.nodes["n5"] = c.net.popen(
        "h1", ["unshare", "-m", "sh", "-c", script], env=c.env("h1"), stdout=log, stderr=subprocess.STDOUT
    )
    log.close()
    c.wait_workers(3, nodes={"n5"})  # PACK puts the 1-rank run on n5 (the most idle workers)
    out, r = c.client(textwrap.dedent(UNWRITABLE), timeout=120)
    assert "node n5" in out["error"] and "cannot write the run directory" in out["error"], out
    assert str(c.storage / "unwritable") in out["error"], out


def test_stop_leaves_no_process_in_any_namespace(three_hosts):
    c = three_hosts
    c.stop()
    for host in ("head", "h1", "h2"):
        assert not c.net.wait_empty(host, timeout=20), f"processes left on {host}: {c.net.pids(host)}"
