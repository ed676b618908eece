"""A trial's function runs in its own trial directory, as Ray Tune's does
(``RAY_CHDIR_TO_TRIAL_DIR``): trials writing the same relative path keep their own files,
``$TUNE_ORIG_WORKING_DIR`` names the driver's directory, and a module beside the driver
still imports. ``RAY_CHDIR_TO_TRIAL_DIR=0`` keeps the driver's directory."""

from __future__ import annotations

import os
import sys

import cloudpickle

from raynb import tune
from raynb.train import RunConfig

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def writes_the_same_relative_path(config):
    import os
    import time

    import beside_the_driver

    from raynb import tune

    os.makedirs("my_model", exist_ok=True)
    with open("my_model/weights.txt", "w") as f:
        f.write(str(config["i"]))
    time.sleep(0.3)  # the other trials write theirs meanwhile
    with open("my_model/weights.txt") as f:
        kept = int(f.read())
    tune.report(
        {
            "kept": kept,
            "cwd": os.getcwd(),
            "orig": os.environ.get("TUNE_ORIG_WORKING_DIR"),
            "beside": beside_the_driver.VALUE,
        }
    )


def _fit(tmp_path, monkeypatch, **env):
    work = tmp_path / "driver"
    work.mkdir()
    (work / "beside_the_driver.py").write_text("VALUE = 42\n")
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    tuner = tune.Tuner(
        writes_the_same_relative_path,
        param_space={"i": tune.grid_search([0, 1, 2])},
        tune_config=tune.TuneConfig(max_concurrent_trials=3),
        run_config=RunConfig(name="cwd", storage_path=str(tmp_path / "results"), verbose=0),
    )
    return work, tuner.fit()


def test_trials_run_in_their_own_directories(warm, tmp_path, monkeypatch):
    work, grid = _fit(tmp_path, monkeypatch)
    assert grid.num_errors == 0, [r.error for r in grid]
    cwds = set()
    for result in grid:
        m = result.metrics
        assert m["kept"] == result.config["i"], "another trial overwrote this one's file"
        assert m["orig"] == str(work)
        assert m["beside"] == 42
        assert os.path.samefile(m["cwd"], result.path)
        assert os.path.isfile(os.path.join(result.path, "my_model", "weights.txt"))
        cwds.add(m["cwd"])
    assert len(cwds) == 3
    assert not (work / "my_model").exists()


def test_the_opt_out_keeps_the_drivers_directory(warm, tmp_path, monkeypatch):
    work, grid = _fit(tmp_path, monkeypatch, RAY_CHDIR_TO_TRIAL_DIR="0")
    assert grid.num_errors == 0, [r.error for r in grid]
    for result in grid:
        assert os.path.samefile(result.metrics["cwd"], work)
        assert result.metrics["orig"] is None
    assert (work / "my_model" / "weights.txt").exists()
