"""get_all_reported_checkpoints() when the run's run.json is not a run record (written over
by the training function, a disk fault): a ValueError naming the file within seconds, not
a wait for good (with timeout_s=None) nor a TimeoutError blaming the head."""

from __future__ import annotations

import sys
import time

import cloudpickle

from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _corrupt_then_ask(config):
    import json
    import os

    from raynb import train

    record = os.path.join(train.get_context().get_storage().experiment_fs_path, "run.json")
    deadline = time.monotonic() + 30
    while not os.path.exists(record) and time.monotonic() < deadline:
        time.sleep(0.05)  # the head's first write of it
    for text in config["texts"]:
        with open(record + ".tmp", "w") as f:
            f.write(text)
        os.replace(record + ".tmp", record)
        t0 = time.monotonic()
        try:
            train.get_all_reported_checkpoints(timeout_s=8)
            said = "returned"
        except Exception as e:
            said = f"{type(e).__name__}: {e}"
        print("SAID", json.dumps([said, round(time.monotonic() - t0, 1)]), flush=True)


def test_a_run_record_that_is_not_one_is_named(cluster, capfd):
    texts = ["{not json", '{"checkpoints": 5}', '{"checkpoints": [{"name": "../../etc"}]}', "[1, 2]"]
    TorchTrainer(
        _corrupt_then_ask,
        train_loop_config={"texts": texts},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name="bad-record"),
    ).fit()
    import json

    said = [
        json.loads(line.split("SAID ", 1)[1])
        for line in capfd.readouterr().out.splitlines()
        if "SAID " in line
    ]
    assert len(said) == len(texts), said
    for message, seconds in said:
        assert message.startswith("ValueError: get_all_reported_checkpoints(): "), message
        assert "run.json is not a run record" in message and "do not write it" in message
        assert seconds < 6, said
