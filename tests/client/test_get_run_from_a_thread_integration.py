"""``raynb.get_run`` from another thread while this process follows a run on its own
connection (a notebook's watcher thread): every call is answered, none steals the fit's
messages."""

from __future__ import annotations

import threading
import time

import raynb
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer


def _epochs(config):
    import time

    from raynb.train import report

    for epoch in range(config["epochs"]):
        time.sleep(0.1)
        report({"epoch": epoch})


def test_get_run_from_a_thread_while_the_fit_follows_its_run(warm):
    name, seen, errors, done = f"watched_{time.time_ns()}", [], [], threading.Event()

    def watch():
        while not done.is_set():
            try:
                seen.append(len(raynb.get_run(name).metrics_dataframe))
            except KeyError:  # not submitted yet
                pass
            except Exception as exc:  # noqa: BLE001 - shown by the assertion below
                errors.append(repr(exc))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = TorchTrainer(
            _epochs,
            train_loop_config={"epochs": 15},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(name=name, verbose=0),
        ).fit()
    finally:
        done.set()
        watcher.join(timeout=30)
    assert not errors, errors[:3]
    assert result.state == "FINISHED" and len(result.metrics_dataframe) == 15, result.error
    assert len(seen) >= 5 and seen == sorted(seen), seen  # answered throughout, rows only grow
