"""Resuming a very long run does not hold the head's loop: its ``result.json`` (hundreds of
thousands of rows) is read, and its ``progress.csv`` written again, off the loop, while
status requests are answered within the budget; the resumed run continues from its
checkpoint, its reports numbered after the old ones, its files whole."""

from __future__ import annotations

import csv
import json
import threading
import time
from pathlib import Path

from conftest import private_cluster

import raynb
from raynb.cluster.protocol import messages
from raynb.cluster.protocol.control import Client
from raynb.train import Checkpoint, RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

# A status reply this slow means the loop was held: reading ROWS rows on it held it about 2 s
# (the figure); off it, replies take milliseconds, more on a loaded test machine.
BUDGET_S = 1.0
ROWS = 300_000


def _epochs(config):
    import os
    import tempfile

    start = 0
    ckpt = raynb.train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = int(open(os.path.join(d, "epoch")).read()) + 1
    for epoch in range(start, start + 2):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch"), "w") as f:
                f.write(str(epoch))
            raynb.train.report(
                {"epoch": epoch, "loss": 1.0 / (epoch + 1)}, checkpoint=Checkpoint.from_directory(d)
            )


def _grow(path: Path) -> None:
    """Put ROWS - 2 older reports before the run's own two (as a long run leaves them)."""
    own = [json.loads(line) for line in (path / "result.json").read_text().splitlines()]
    row = dict(own[0])
    with open(path / "result.json", "w") as f:
        for i in range(ROWS - len(own)):
            row["training_iteration"] = i + 1
            row["time_total_s"] = float(i)
            f.write(json.dumps(row) + "\n")
        for i, r in enumerate(own):
            r["training_iteration"] = ROWS - len(own) + i + 1
            r["time_total_s"] = float(ROWS + i)
            f.write(json.dumps(r) + "\n")
    state = json.loads((path / "run.json").read_text())
    state["num_reports"] = ROWS
    (path / "run.json").write_text(json.dumps(state))


def _watch(client: Client, stop: threading.Event, out: list) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        client.request(messages.STATUS_REQUEST, {}, reply_types=(messages.STATUS_REPLY,), timeout=10)
        out.append(time.perf_counter() - t)
        time.sleep(0.02)


def test_a_very_long_run_resumes_with_the_head_answering(tmp_path, monkeypatch):
    with private_cluster(tmp_path, monkeypatch, workers=1) as (info, _, _pids):
        first = TorchTrainer(
            _epochs, scaling_config=ScalingConfig(num_workers=1), run_config=RunConfig(name="long", verbose=0)
        ).fit()
        assert first.error is None, first.error
        path = Path(first.path)
        _grow(path)
        other = Client(info["address"], info["key"].encode(), info)
        latencies: list[float] = []
        stop = threading.Event()
        watcher = threading.Thread(target=_watch, args=(other, stop, latencies))
        watcher.start()
        try:
            time.sleep(0.5)
            resumed = TorchTrainer.restore(str(path)).fit()
            time.sleep(0.5)
        finally:
            stop.set()
            watcher.join(30)
            other.close()
        assert resumed.error is None, resumed.error
        # The loop answered throughout: the read of 300,000 rows was not on it.
        latencies.sort()
        assert len(latencies) >= 10, latencies
        assert latencies[-1] < BUDGET_S, f"status latencies (s), slowest last: {latencies[-5:]}"
        # Resumed from the checkpoint of epoch 1, its reports numbered after the old ones.
        assert resumed.metrics["epoch"] == 3 and resumed.metrics["training_iteration"] == ROWS + 2
        assert resumed.metrics["time_total_s"] >= ROWS + 1
        rows = [json.loads(line) for line in (path / "result.json").read_text().splitlines()]
        assert len(rows) == ROWS + 2 and [r["epoch"] for r in rows[-4:]] == [0, 1, 2, 3]
        with open(path / "progress.csv", newline="") as f:
            table = list(csv.DictReader(f))
        assert len(table) == ROWS + 2 and table[-1]["epoch"] == "3", table[-1]
        assert [int(r["training_iteration"]) for r in table[-3:]] == [ROWS, ROWS + 1, ROWS + 2]
        assert raynb.get_run("long").metrics["training_iteration"] == ROWS + 2


def test_a_resume_of_an_unreadable_run_is_refused_naming_the_file(tmp_path, monkeypatch):
    with private_cluster(tmp_path, monkeypatch, workers=1):
        first = TorchTrainer(
            _epochs, scaling_config=ScalingConfig(num_workers=1), run_config=RunConfig(name="bad", verbose=0)
        ).fit()
        path = Path(first.path)
        trainer = TorchTrainer.restore(str(path))
        (path / "params.json").unlink()  # after restore() read it: the head finds it gone
        try:
            trainer.fit()
        except Exception as e:  # noqa: BLE001 - the refusal's type is the client's
            message = str(e)
        else:
            raise AssertionError("a resume of a run without params.json was not refused")
        assert "cannot resume run 'bad'" in message and "params.json" in message, message
        # The head is fine and the name is free for a later resume.
        again = TorchTrainer(
            _epochs, scaling_config=ScalingConfig(num_workers=1), run_config=RunConfig(name="good", verbose=0)
        ).fit()
        assert again.error is None
