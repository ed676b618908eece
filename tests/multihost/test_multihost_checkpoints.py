"""Checkpoints on the head's disk, read from a notebook on another machine: the head, two
node agents and a client, each in a network namespace of its own (``multihost_fixture``,
CurveZMQ off loopback). A 2-rank run on the node hosts (which do not mount the head's
storage) streams its checkpoints to the head's default storage; the client's script runs
with a private tmpfs mounted over that storage directory (in the mount namespace
``ip netns exec`` makes for it), so it truly cannot read it, as a laptop cannot. Its
``result.checkpoint`` downloads through the head (``raynb.client.checkpoint_fetch``).
Skipped where namespaces cannot be made (not root)."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest
from support.multihost_fixture import cluster_up

NODES = (f"xk{os.getpid()}a", f"xk{os.getpid()}b")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    with cluster_up(tmp_path_factory.mktemp("multihost-ckpt"), tag="k", node_ids=NODES) as c:
        yield c


def _laptop(c, code: str, timeout: float = 90):
    """Run ``code`` in the client namespace with the head's storage hidden under a tmpfs."""
    script = c.client_prelude() + textwrap.dedent(code)
    args = [
        "sh",
        "-c",
        f'mount -t tmpfs -o size=16m,mode=0700 raynb-test {c.storage} && exec "$@"',
        "sh",
        sys.executable,
        "-c",
        script,
    ]
    r = c.net.run("client", args, env=c.env("client"), timeout=timeout)
    assert r.returncode == 0, f"client script failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return json.loads([line for line in r.stdout.splitlines() if line.startswith("{")][-1])


RUN_AND_READ = """
    import hashlib, shutil, tempfile
    from raynb import Checkpoint, RunConfig, ScalingConfig, TorchTrainer
    from raynb.train import get_context, report

    def blob(epoch, rank):   # 700 KB: several pieces (ckpt_transfer.PIECE_BYTES)
        return hashlib.sha256(f"{epoch}-{rank}".encode()).digest() * (700_000 // 32)

    def loop():
        rank = get_context().get_world_rank()
        for epoch in range(3):
            with tempfile.TemporaryDirectory() as d:
                os.makedirs(os.path.join(d, "sub"))
                with open(os.path.join(d, f"rank{rank}.bin"), "wb") as f:
                    f.write(blob(epoch, rank))
                with open(os.path.join(d, "sub", "epoch.txt"), "w") as f:
                    f.write(str(epoch))
                open(os.path.join(d, "empty"), "wb").close()
                report({"epoch": epoch, "node": os.environ["RAYNB_NODE_ID"]},
                       checkpoint=Checkpoint.from_directory(d))

    raynb.connect(ADDRESS, key_file=KEY_FILE)
    r = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2, placement_strategy="PACK"),
                     run_config=RunConfig(name="laptop-ckpt", verbose=0)).fit()
    ck = r.checkpoint

    def read(d):
        return {"files": sorted(os.path.relpath(os.path.join(p, n), d) for p, _, ns in os.walk(d) for n in ns),
                "ok": [open(os.path.join(d, f"rank{k}.bin"), "rb").read() == blob(2, k) for k in (0, 1)],
                "epoch": open(os.path.join(d, "sub", "epoch.txt")).read()}

    with ck.as_directory() as d:
        via_as = read(d)
        tmp_dir = d
    target = tempfile.mkdtemp()
    written = ck.to_directory(os.path.join(target, "ck"))
    best_first = r.best_checkpoints[0][0].to_directory()
    print(json.dumps({"error": None if r.error is None else str(r.error), "path": ck.path,
                      "run_dir": r.path, "visible": os.path.exists(r.path), "as": via_as,
                      "as_removed": not os.path.exists(tmp_dir), "to": read(written),
                      "written": written, "mode": oct(os.stat(written).st_mode & 0o777),
                      "first_epoch": open(os.path.join(best_first, "sub", "epoch.txt")).read(),
                      "nodes": r.metrics["node"]}))
    shutil.rmtree(target)  # the downloads this script asked for are its own to remove
    shutil.rmtree(best_first)
"""


def test_laptop_reads_a_checkpoint_on_the_heads_disk_through_the_head(hosts):
    c = hosts
    out = _laptop(c, RUN_AND_READ)
    assert out["error"] is None
    assert out["nodes"] in NODES  # ranks on a node host, not the head
    assert out["path"].startswith(str(c.storage)) and not out["visible"]  # hidden from the laptop
    expected = sorted(["empty", "rank0.bin", "rank1.bin", os.path.join("sub", "epoch.txt")])
    for got in (out["as"], out["to"]):
        assert got == {"files": expected, "ok": [True, True], "epoch": "2"}, got
    assert out["as_removed"]  # as_directory's download is temporary
    assert out["written"].endswith("/ck") and out["mode"] == "0o700"
    assert out["first_epoch"] == "0"  # best_checkpoints download too
    # the head's own copy is the one the laptop read
    with open(os.path.join(out["path"], "sub", "epoch.txt")) as f:
        assert f.read() == "2"
    assert os.path.basename(out["path"]).startswith("checkpoint_")


TAMPERED = """
    from raynb.cluster.protocol import messages as P
    from raynb.cluster.storage.checkpoint_stream import TransferError, _Link, download_for_client

    c = raynb.connect(ADDRESS, key_file=KEY_FILE)
    run = [x for x in c.request(P.LIST_RUNS, {}, (P.RUNS_REPLY,)).content["runs"] if x["name"] == "laptop-ckpt"]
    out = {}
    if run:
        rid, rdir = run[-1]["run_id"], run[-1]["path"]
        rec = c.request(P.GET_RUN, {"name": "laptop-ckpt"}, (P.RUN_RECORD,)).content["record"]
        good = rec["checkpoints"][-1]["path"]
    else:   # this test alone: a 1-rank run of its own
        from raynb import Checkpoint, RunConfig, ScalingConfig, TorchTrainer
        from raynb.train import report
        import tempfile

        def loop():
            with tempfile.TemporaryDirectory() as d:
                open(os.path.join(d, "x"), "w").write("x")
                report({"a": 1}, checkpoint=Checkpoint.from_directory(d))
        r = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=1),
                         run_config=RunConfig(name="laptop-ckpt", verbose=0)).fit()
        rec = c.request(P.GET_RUN, {"name": "laptop-ckpt"}, (P.RUN_RECORD,)).content["record"]
        rid, rdir, good = rec["run_id"], rec["path"], rec["checkpoints"][-1]["path"]

    def refused(run_id, ckpt, **extra):
        link = _Link("checkpoint", c.info)
        try:
            link.send(P.CHECKPOINT_FETCH, {"run_id": run_id, "checkpoint": ckpt, **extra})
            link.reply("a fetch")
            return None
        except TransferError as e:
            return str(e)
        finally:
            link.close()

    out["escape"] = refused(rid, rdir + "/../checkpoint_x")
    out["outside"] = refused(rid, "/etc")
    out["run_dir"] = refused(rid, rdir)
    out["staging"] = refused(rid, rdir + "/.staging")
    out["other_run"] = refused("no-such-run", good)
    out["up_path"] = refused(rid, good, path="../run.json", offset=0)
    out["abs_path"] = refused(rid, good, path="/etc/passwd", offset=0)
    # a rank-style fetch (not a client) naming no rank or worker: refused, not a crash
    import zmq
    from raynb.cluster.protocol import curve_auth as curve
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, P.routing_id("transfer", "w"))
    curve.secure_client(sock, c.info.get("curve"))
    sock.connect(c.info["address"])
    session = P.Session(c.info["key"].encode(), validate=True)
    session.send(sock, P.CHECKPOINT_FETCH, {"run_id": rid, "checkpoint": good})
    reply = session.recv(sock) if sock.poll(20000) else None
    out["rankless"] = reply.content.get("message") if reply is not None and reply.msg_type == P.ERROR else None
    sock.close(0)
    # and the good one still downloads after all that
    import shutil, tempfile
    tmp = tempfile.mkdtemp()
    out["good_files"] = sorted(os.listdir(download_for_client(c.info, rid, good, os.path.join(tmp, "d"))))
    shutil.rmtree(tmp)
    out["alive"] = c.ping()
    print(json.dumps(out))
"""


def test_a_tampered_or_unsafe_checkpoint_fetch_is_refused(hosts):
    out = _laptop(hosts, TAMPERED)
    for k in ("escape", "outside", "run_dir", "staging", "other_run", "rankless"):
        assert out[k] and "no checkpoint" in out[k], (k, out[k])
    for k in ("up_path", "abs_path"):
        assert out[k] and "unsafe checkpoint path" in out[k], (k, out[k])
    assert out["good_files"] and out["alive"]


REMOVES_ITS_RUN_DIR = """
    import shutil, tempfile, time
    from raynb import Checkpoint, RunConfig, RunError, ScalingConfig, TorchTrainer
    from raynb.train import get_context, report

    def loop():
        for epoch in range(2):
            if epoch == 1:   # the node host sees the head's disk here, but streams its checkpoints
                time.sleep(0.5)   # the head commits epoch 0's checkpoint meanwhile
                while os.path.exists(get_context().get_trial_dir()):
                    shutil.rmtree(get_context().get_trial_dir(), ignore_errors=True)
            with tempfile.TemporaryDirectory() as d:
                open(os.path.join(d, "x"), "w").write(str(epoch))
                report({"epoch": epoch, "node": os.environ["RAYNB_NODE_ID"]},
                       checkpoint=Checkpoint.from_directory(d))

    raynb.connect(ADDRESS, key_file=KEY_FILE)
    try:
        TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=1),
                     run_config=RunConfig(name="streamed-gone", verbose=0)).fit()
        out = {"error": None}
    except RunError as e:
        out = {"error": str(e), "path": e.result.path, "errors": e.errors}
    print(json.dumps(out))
"""


def test_a_streamed_checkpoint_does_not_make_a_removed_run_directory_again(hosts):
    # The head staged a streamed checkpoint with mkdir(parents=True): a run directory removed
    # while the run ran came back, holding only the later checkpoints, in the umask's mode.
    c = hosts
    script = c.client_prelude() + textwrap.dedent(REMOVES_ITS_RUN_DIR)
    r = c.net.run("client", [sys.executable, "-c", script], env=c.env("client"), timeout=90)
    assert r.returncode == 0, f"client script failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    out = json.loads([line for line in r.stdout.splitlines() if line.startswith("{")][-1])
    assert out["error"] is not None, "the run ended well over a removed directory"
    assert f"the run directory {out['path']} is gone (removed while the run ran?)" in out["error"], out[
        "error"
    ]
    assert out["errors"][0]["rank"] == 0, out["errors"]
    assert out["path"].startswith(str(c.storage)) and not os.path.exists(out["path"])
