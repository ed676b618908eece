"""Checkpoints without a cluster: the Checkpoint API on local directories, and a run
directory's checkpoint adopted or found on disk (the real runs are in
test_checkpoints_integration.py)."""

from __future__ import annotations

import json
import os
import sys

import cloudpickle
import pytest

from raynb.train import Checkpoint

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_from_directory_missing_and_file(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError) as e:
        Checkpoint.from_directory(missing)
    assert str(missing) in str(e.value)
    f = tmp_path / "model.pt"
    f.write_bytes(b"x")
    with pytest.raises(NotADirectoryError) as e:
        Checkpoint.from_directory(f)
    assert str(f) in str(e.value)


def test_as_directory_and_to_directory(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "model.pt").write_bytes(b"weights")
    (src / "sub" / "opt.pt").write_bytes(b"moments")
    ckpt = Checkpoint.from_directory(src)
    assert ckpt.path == str(src) and os.path.isabs(ckpt.path)
    with ckpt.as_directory() as d:
        assert open(os.path.join(d, "model.pt"), "rb").read() == b"weights"
    fresh = ckpt.to_directory()
    try:
        assert fresh != str(src)
        assert open(os.path.join(fresh, "sub", "opt.pt"), "rb").read() == b"moments"
    finally:
        import shutil

        shutil.rmtree(fresh)
    target = tmp_path / "copy"
    assert ckpt.to_directory(target) == str(target)
    assert (target / "model.pt").read_bytes() == b"weights"
    assert (target / "sub" / "opt.pt").read_bytes() == b"moments"
    # The copy is independent of the source.
    (target / "model.pt").write_bytes(b"changed")
    assert (src / "model.pt").read_bytes() == b"weights"


def test_a_checkpoint_renamed_but_not_yet_recorded_is_adopted(tmp_path):
    """The head renames checkpoint_000NNN into place, then records it in run.json; killed
    in between, the record lags the disk. A resumed run must resume from the newest whole
    checkpoint and number the next one after it (never overwrite it)."""
    from raynb.cluster.storage.checkpoints import CheckpointStore

    for i in (0, 1):
        (tmp_path / f"checkpoint_{i:06d}").mkdir()
        (tmp_path / f"checkpoint_{i:06d}" / "state.json").write_text(str(i))
    (tmp_path / ".tmp_checkpoint_000002").mkdir()  # a half commit: not a checkpoint
    recorded = [{"index": 0, "name": "checkpoint_000000", "metrics": {"loss": 1.0}}]
    store = CheckpointStore(tmp_path, None, recorded)
    assert store.latest_path() == str(tmp_path / "checkpoint_000001")
    assert store.next_index == 2
    assert [c["name"] for c in store.records()] == ["checkpoint_000000", "checkpoint_000001"]


def test_a_committed_checkpoints_report_row_is_on_disk_with_it(tmp_path, monkeypatch):
    """The head's report rows go to result.json in batches (at its tick); a checkpoint
    commits, and run.json names it, at once. A head SIGKILLed between the two left a run
    whose resume continued from a checkpoint whose report result.json did not hold
    (test_head_sigkill_leaves_no_process_then_start_and_restore_work, once in CI). The
    head's own RunStore, on real files: the row is written before the checkpoint."""
    from raynb.cluster.head.store import RunStore
    from raynb.cluster.protocol import signing

    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "home"))
    store = RunStore(lambda run, event: None)
    run = store.create(
        {"run_id": "r1", "name": "rows", "num_workers": 2, "storage_path": str(tmp_path)},
        b"client:x",
        signing.Payload([b"fn"]),
        b"fn",
    )
    staged = run.rundir.path / ".staging" / "0_2" / "rank_0"
    staged.mkdir(parents=True)
    (staged / "state.json").write_text('{"epoch": 1}')
    result_json = run.rundir.path / "result.json"
    for index, epoch in ((1, 0), (2, 1)):
        store.report(run, 1, {"metrics": {"epoch": epoch}, "index": index})
        event = {"metrics": {"epoch": epoch}, "index": index}
        if index == 2:
            event["checkpoint"] = str(staged)
        store.report(run, 0, event)
        store.commit_checkpoints(run)
    assert (run.rundir.path / "checkpoint_000000" / "state.json").is_file()
    rows = [json.loads(line) for line in result_json.read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1]  # no tick ran: written for the commit
    run.rundir.close()
