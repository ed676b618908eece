"""An elastic run over hosts in network namespaces (``multihost_fixture``): ``(2, 4)``
starts on one host's 2 workers, grows to 4 ranks when a second host's node agent joins
mid-run, and goes on at 2 when that host dies, every epoch trained once past the
checkpoint it resumed from."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
from support import netns
from support.multihost_fixture import hosts_up

ELASTIC_RUN = """
    import tempfile
    import torch
    import torch.distributed as dist
    from raynb import Checkpoint, FailureConfig, RunConfig, ScalingConfig, TorchTrainer
    from raynb.train import get_checkpoint, get_context, report

    def loop():
        ctx = get_context()
        ckpt = get_checkpoint()
        start = 0
        if ckpt is not None:
            with ckpt.as_directory() as d:
                start = torch.load(os.path.join(d, "state.pt"))["epoch"] + 1
        for epoch in range(start, 100_000):
            # One collective an epoch, which also says whether the test asked to stop.
            t = torch.tensor([1.0, float(os.path.exists(STOP))])
            dist.all_reduce(t)
            if t[1] > 0:
                break
            time.sleep(EPOCH_S)
            with tempfile.TemporaryDirectory() as d:
                if ctx.get_world_rank() == 0:
                    torch.save({"epoch": epoch}, os.path.join(d, "state.pt"))
                report({"epoch": epoch, "start": start, "world": t[0].item(),
                        "host": os.environ.get("RAYNB_NODE_IP")},
                       checkpoint=Checkpoint.from_directory(d) if ctx.get_world_rank() == 0 else None)

    raynb.connect(KEY_FILE)
    r = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=(2, 4), elastic_resize_monitor_interval_s=1),
                     run_config=RunConfig(name=NAME, failure_config=FailureConfig(max_failures=2))).fit()
    print(json.dumps({"error": None if r.error is None else str(r.error), "failures": len(r.failures),
                      "sizes": [int(x) for x in r.metrics_dataframe["world_size"]]}))
"""


def _reports(run_dir) -> list[dict]:
    path = run_dir / "result.json"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [
        json.loads(line) for line in lines[:-1] + [x for x in lines[-1:] if x.endswith("}")] if line.strip()
    ]


def _wait_reports(run_dir, client, until, timeout: float = 120) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        reports = _reports(run_dir)
        if until(reports):
            return reports
        assert time.monotonic() < deadline and client.poll() is None, (reports[-3:], client.poll())
        time.sleep(0.1)


def test_elastic_run_grows_when_a_host_joins_and_shrinks_when_it_dies(tmp_path):
    why = netns.available()
    if why:
        pytest.skip(why)
    name, stop = "elastic-hosts", tmp_path / "stop"
    with hosts_up(tmp_path, nodes=(), tag="el") as c:
        c.start_node("h1", "n1", 2, "--max-workers", "2")  # holds 2, forks no more
        c.wait_workers(2)
        run_dir = c.storage / name
        code = f"EPOCH_S, NAME, STOP = 0.3, {name!r}, {str(stop)!r}\n" + textwrap.dedent(ELASTIC_RUN)
        client = c.net.popen(
            "client",
            [sys.executable, "-c", c.client_prelude() + code],
            env=c.env("client"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _wait_reports(run_dir, client, lambda rs: len(rs) >= 3)
            c.start_node("h2", "n2", 2, "--max-workers", "2")  # a second host's node agent joins mid-run
            # (n2's zygote imports torch: tens of seconds on a busy machine)
            grown = _wait_reports(
                run_dir, client, lambda rs: any(r["world_size"] == 4 for r in rs), timeout=240
            )
            _wait_reports(run_dir, client, lambda rs: len(rs) >= len(grown) + 2)
            killed = c.net.kill_all("h2")  # the host dies: its agent, zygote and workers at once
            assert killed and not c.net.wait_empty("h2")
            n = len(_reports(run_dir))
            _wait_reports(
                run_dir, client, lambda rs: len(rs) > n + 2 and rs[-1]["world_size"] == 2, timeout=180
            )
            stop.touch()
            out, err = client.communicate(timeout=120)
        finally:
            if client.poll() is None:
                client.kill()
                client.communicate()
    result = json.loads([x for x in out.splitlines() if x.startswith("{")][-1])
    assert result["error"] is None, out + err
    assert result["failures"] == 1, out  # the host's loss; the grow is not a failure
    reports = _reports(run_dir)
    sizes = [r["world_size"] for r in reports]
    first4, last4 = sizes.index(4), len(sizes) - 1 - sizes[::-1].index(4)
    assert set(sizes[:first4]) == {2} and set(sizes[first4 : last4 + 1]) == {4}, sizes
    assert set(sizes[last4 + 1 :]) == {2} and len(sizes) > last4 + 1, sizes
    assert all(r["world"] == r["world_size"] for r in reports), reports
    # Each attempt resumed from the latest checkpoint (its ``start``) and trained every
    # epoch from there once; the grow stopped at a committed checkpoint: nothing redone.
    attempts: dict[int, list] = {}
    for r in reports:
        attempts.setdefault(r["start"], []).append(r["epoch"])
    assert all(e == list(range(s, s + len(e))) for s, e in attempts.items()), attempts
    assert sorted({r["epoch"] for r in reports}) == list(range(reports[-1]["epoch"] + 1)), attempts
    assert reports[first4]["start"] == reports[first4 - 1]["epoch"] + 1, reports
    assert {r["host"] for r in reports} == {"198.18.0.2"}  # rank 0's reports: n1 holds rank 0
    assert "grew 2 -> 4 ranks (node n2 joined); resumed from checkpoint_" in out, out
    assert "shrank 4 -> 2 ranks (node n2 lost" in out, out
