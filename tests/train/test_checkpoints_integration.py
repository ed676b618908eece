"""Checkpoints on the real cluster: the Checkpoint API, staging, merging, numbering, pruning.

Every run here is a real 4-rank run on the session cluster; the checkpoint files
are written by the workers and committed by the head into the run directory.
"""

from __future__ import annotations

import json
import os
import sys

import cloudpickle
import pytest
from conftest import wait_idle_workers

import raynb
from raynb.train import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

# Functions defined here travel by value, as a notebook's do.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

FOUR = ScalingConfig(num_workers=4)


def _quiet(**kw) -> RunConfig:
    return RunConfig(verbose=0, **kw)


def _leftovers(run_path: str) -> list[str]:
    """Half-written things a run must not leave behind (staging, temporary checkpoints)."""
    out = []
    for root, dirs, files in os.walk(run_path):
        for n in dirs + files:
            if n.startswith(".staging") or n.startswith(".tmp"):
                out.append(os.path.relpath(os.path.join(root, n), run_path))
    return out


def _checkpoint_dirs(run_path: str) -> list[str]:
    return sorted(n for n in os.listdir(run_path) if n.startswith("checkpoint_"))


# -- the Checkpoint object, no cluster ----------------------------------------------------


def _from_directory_as_nobody(path) -> str:
    """``Checkpoint.from_directory(path)`` in a forked child that dropped to ``nobody``
    (the tests run as root, which reads everything); returns what it raised."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        try:
            os.close(r)
            os.setgid(65534)
            os.setuid(65534)
            try:
                Checkpoint.from_directory(path)
                out = "no error"
            except Exception as e:  # noqa: BLE001
                out = f"{type(e).__name__}: {e}"
            os.write(w, out.encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


def test_from_directory_unreadable():
    """A directory this process cannot list, or cannot even reach: a PermissionError
    from from_directory that names the directory and says what is wrong."""
    import shutil
    import tempfile

    top = tempfile.mkdtemp(prefix="raynb_ckpt_perm_")
    try:
        os.chmod(top, 0o755)
        locked = os.path.join(top, "locked")
        os.mkdir(locked)
        os.chmod(locked, 0o755)  # whatever this process's umask
        open(os.path.join(locked, "model.pt"), "w").close()
        assert _from_directory_as_nobody(locked) == "no error"  # the child can read it when allowed
        os.chmod(locked, 0)
        out = _from_directory_as_nobody(locked)
        assert out.startswith("PermissionError: "), out
        assert "from_directory" in out and locked in out and "not readable" in out, out
        # Inside a directory it cannot enter: still from_directory's own error.
        os.chmod(locked, 0o755)
        os.chmod(top, 0o700)
        out = _from_directory_as_nobody(locked)
        assert out.startswith("PermissionError: "), out
        assert "from_directory" in out and locked in out, out
    finally:
        os.chmod(top, 0o755)
        shutil.rmtree(top)


# -- report(checkpoint=...) on the cluster -----------------------------------------------


def _report_not_a_checkpoint(config):
    from raynb.train import report

    report({"epoch": 0}, checkpoint=config["what"])


def test_report_with_non_checkpoint_is_type_error_naming_it(warm, tmp_path):
    passed = str(tmp_path / "a_plain_string_path")
    with pytest.raises(raynb.RunError) as info:
        TorchTrainer(
            _report_not_a_checkpoint,
            train_loop_config={"what": passed},
            scaling_config=FOUR,
            run_config=_quiet(),
        ).fit()
    e = info.value
    assert e.errors[0]["exc_type"] == "TypeError", e.errors
    msg = e.errors[0]["message"]
    assert "str" in msg and repr(passed)[:60] in msg, msg
    assert "TypeError" in e.remote_traceback and "report" in e.remote_traceback
    assert "_report_not_a_checkpoint" in e.remote_traceback
    assert _checkpoint_dirs(e.result.path) == []
    wait_idle_workers(warm, 4)


def _reports_checkpoints(config):
    """Each of ``config["epochs"]`` reports carries a checkpoint from the ranks in
    ``config["ranks"]``: every such rank writes ``shard_<rank>.txt``, ``meta.txt``
    (a clash: each rank writes its own rank) and ``sub/part_<rank>``."""
    import json
    import os
    import tempfile

    from raynb.train import Checkpoint, get_context, report

    rank = get_context().get_world_rank()
    for epoch in range(config["epochs"]):
        metrics = {"epoch": epoch, **{k: v[epoch] for k, v in config.get("metrics", {}).items()}}
        if rank not in config["ranks"]:
            report(metrics)
            continue
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, f"shard_{rank}.txt"), "w") as f:
                f.write(f"{rank}:{epoch}")
            with open(os.path.join(d, "meta.txt"), "w") as f:
                json.dump({"rank": rank, "epoch": epoch}, f)
            os.mkdir(os.path.join(d, "sub"))
            with open(os.path.join(d, "sub", f"part_{rank}"), "w") as f:
                f.write(str(epoch))
            report(metrics, checkpoint=Checkpoint.from_directory(d))


def test_rank0_only_checkpoint(warm):
    result = TorchTrainer(
        _reports_checkpoints,
        train_loop_config={"epochs": 1, "ranks": [0]},
        scaling_config=FOUR,
        run_config=_quiet(),
    ).fit()
    assert _checkpoint_dirs(result.path) == ["checkpoint_000000"]
    ck = result.checkpoint
    assert ck.path == os.path.join(result.path, "checkpoint_000000")
    with ck.as_directory() as d:
        files = sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)
        assert files == ["meta.txt", "shard_0.txt", "sub/part_0"], files
        assert json.load(open(os.path.join(d, "meta.txt"))) == {"rank": 0, "epoch": 0}
    assert _leftovers(result.path) == []


def test_sharded_checkpoint_merges_ranks_and_rank0_wins(warm):
    result = TorchTrainer(
        _reports_checkpoints,
        train_loop_config={"epochs": 3, "ranks": [0, 1, 2, 3]},
        scaling_config=FOUR,
        run_config=_quiet(),
    ).fit()
    # One checkpoint per report, numbered from 0.
    assert _checkpoint_dirs(result.path) == [f"checkpoint_{i:06d}" for i in range(3)]
    assert result.checkpoint.path == os.path.join(result.path, "checkpoint_000002")
    for i in range(3):
        d = os.path.join(result.path, f"checkpoint_{i:06d}")
        files = sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)
        assert files == (
            ["meta.txt"] + [f"shard_{r}.txt" for r in range(4)] + [f"sub/part_{r}" for r in range(4)]
        ), files
        for r in range(4):
            assert open(os.path.join(d, f"shard_{r}.txt")).read() == f"{r}:{i}"
        # Every rank wrote meta.txt: rank 0's copy is the one kept.
        assert json.load(open(os.path.join(d, "meta.txt"))) == {"rank": 0, "epoch": i}
    # Without a score attribute: every checkpoint kept, oldest first, each with its report.
    assert [c.path for c, _ in result.best_checkpoints] == [
        os.path.join(result.path, f"checkpoint_{i:06d}") for i in range(3)
    ]
    assert [m["epoch"] for _, m in result.best_checkpoints] == [0, 1, 2]
    assert _leftovers(result.path) == []


@pytest.mark.parametrize("order", ["max", "min"])
def test_checkpoint_config_prunes_by_score_and_orders_best(warm, order):
    scores = [0.5, 0.9, 0.1, 0.7, 0.3]
    result = TorchTrainer(
        _reports_checkpoints,
        train_loop_config={"epochs": 5, "ranks": [0], "metrics": {"acc": scores}},
        scaling_config=FOUR,
        run_config=_quiet(
            checkpoint_config=CheckpointConfig(
                num_to_keep=2, checkpoint_score_attribute="acc", checkpoint_score_order=order
            )
        ),
    ).fit()
    best_other = 1 if order == "max" else 2  # epoch with the best score (0.9, or 0.1 for min)
    # The best one is kept, and the latest always is (a restart resumes from it).
    assert _checkpoint_dirs(result.path) == sorted([f"checkpoint_{best_other:06d}", "checkpoint_000004"])
    assert result.checkpoint.path == os.path.join(result.path, "checkpoint_000004")
    best = result.best_checkpoints
    assert [m["epoch"] for _, m in best] == [best_other, 4], best
    assert [m["acc"] for _, m in best] == [scores[best_other], scores[4]]
    for ck, m in best:
        with ck.as_directory() as d:
            assert json.load(open(os.path.join(d, "meta.txt")))["epoch"] == m["epoch"]
    # The same list from the run directory alone, and from the head's record.
    again = raynb.train.Result.from_path(result.path)
    assert [(c.path, m["epoch"]) for c, m in again.best_checkpoints] == [
        (c.path, m["epoch"]) for c, m in best
    ]
    assert again.checkpoint == result.checkpoint
    assert _leftovers(result.path) == []


def test_checkpoint_config_num_to_keep_by_age(warm):
    result = TorchTrainer(
        _reports_checkpoints,
        train_loop_config={"epochs": 4, "ranks": [0, 2]},
        scaling_config=FOUR,
        run_config=_quiet(checkpoint_config=CheckpointConfig(num_to_keep=2)),
    ).fit()
    assert _checkpoint_dirs(result.path) == ["checkpoint_000002", "checkpoint_000003"]
    assert [m["epoch"] for _, m in result.best_checkpoints] == [2, 3]
    assert result.checkpoint.path.endswith("checkpoint_000003")
    assert sorted(os.listdir(result.checkpoint.path)) == ["meta.txt", "shard_0.txt", "shard_2.txt", "sub"]
    assert _leftovers(result.path) == []
