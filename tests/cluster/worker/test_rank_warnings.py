"""A rank shows a Python warning once per location, as one Python process does, across
the iterations of a loop, a data shard's batches, and the runs a warm worker takes.

The functions are defined as a notebook's or a script's are (``__name__ == "__main__"``),
so they are shipped by value and arrive with fresh globals at every task.
"""

import uuid

import numpy as np

import raynb
from raynb import data as rd
from raynb.cluster.worker import warning_registry
from raynb.train.torch import TorchTrainer

SOURCE = """
import os, warnings

def loop(config):
    shown = warnings.showwarning
    def count(message, category, filename, lineno, file=None, line=None):
        with open(config["log"], "a") as f:
            f.write(f"{os.getpid()} {lineno}\\n")
    warnings.showwarning = count   # called only for the warnings the filters let through
    try:
        shard = raynb.train.get_dataset_shard("train")
        for epoch in range(3):
            for batch in shard.iter_torch_batches(batch_size=4, prefetch_batches=0):
                warnings.warn("in the batches' loop", UserWarning)
        for i in range(100):
            warnings.warn("in a plain loop", UserWarning)
    finally:
        warnings.showwarning = shown
"""


def _main_function(source: str, name: str):
    ns = {"__name__": "__main__", "raynb": raynb}
    exec(compile(source, f"<cell-{uuid.uuid4().hex[:8]}>", "exec"), ns)
    return ns[name]


def test_a_rank_warns_once_per_location_across_runs(cluster, tmp_path):
    loop = _main_function(SOURCE, "loop")
    log = tmp_path / "shown.txt"
    ds = rd.from_numpy({"x": np.arange(40, dtype=np.float32)})
    for _ in range(2):  # the second run: the same warm workers, or others
        TorchTrainer(
            loop,
            train_loop_config={"log": str(log)},
            datasets={"train": ds},
            scaling_config=raynb.ScalingConfig(num_workers=2),
        ).fit()
    shown = [tuple(line.split()) for line in log.read_text().splitlines()]
    pids = {pid for pid, _ in shown}
    lines = {lineno for _, lineno in shown}
    assert len(pids) >= 2 and len(lines) == 2, shown
    assert sorted(shown) == sorted(set(shown)), f"a location warned twice on one process: {shown}"
    assert len(shown) == 2 * len(pids), shown


def test_registries_are_given_to_functions_shipped_by_value_only():
    f = _main_function("def f():\n    return 1\n", "f")
    g = _main_function("def g(h=None):\n    return h\n", "g")
    assert warning_registry.keep_registries((f, {"nested": [g]})) == 2
    assert f.__globals__["__warningregistry__"] is not g.__globals__["__warningregistry__"]
    assert warning_registry.keep_registries(np.mean) == 0  # an imported module's: its own


TRIAL_SOURCE = """
import os, warnings

def trainable(config):
    shown = warnings.showwarning
    def count(message, category, filename, lineno, file=None, line=None):
        with open(config["log"], "a") as f:
            f.write(f"{os.getpid()} {lineno}\\n")
    warnings.showwarning = count
    try:
        for i in range(20):
            warnings.warn("in every trial's loop", UserWarning)
            raynb.tune.report({"i": i, "pid": os.getpid()})
    finally:
        warnings.showwarning = shown
"""


def test_tune_trials_on_warm_workers_warn_once_per_process(cluster, tmp_path):
    import raynb.tune as tune

    trainable = _main_function(TRIAL_SOURCE, "trainable")
    log = tmp_path / "shown.txt"
    grid = tune.Tuner(
        trainable,
        param_space={"x": tune.grid_search(list(range(8))), "log": str(log)},
        run_config=raynb.train.RunConfig(verbose=0),
    ).fit()
    assert not [r.error for r in grid if r.error]
    shown = [tuple(line.split()) for line in log.read_text().splitlines()]
    ran_on = {int(r.metrics["pid"]) for r in grid}
    # 8 trials on the warm workers (fewer than 8 processes: some ran several trials): the
    # warning once per worker process that ran a trial, not once per trial
    assert len(ran_on) < 8, ran_on
    assert sorted(shown) == sorted(set(shown)) and {int(pid) for pid, _ in shown} == ran_on, (shown, ran_on)
