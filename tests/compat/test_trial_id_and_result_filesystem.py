"""Ray's ``TrainContext.get_trial_id()`` (a Tune trial's id, as its results carry it; a plain
run's unique name suffix) and ``Result.filesystem`` (the pyarrow file system of its path)."""

from __future__ import annotations

import sys

import cloudpickle
import pyarrow.fs as pafs

import raynb
from raynb import tune
from raynb.train import Result, RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _report_trial_id(config=None):
    raynb.train.report({"tid": raynb.train.get_context().get_trial_id(), "score": 1.0})


def test_get_trial_id_in_a_run_and_in_a_tune_trial(cluster, tmp_path):
    result = TorchTrainer(
        _report_trial_id, scaling_config=ScalingConfig(num_workers=1), run_config=RunConfig(verbose=0)
    ).fit()
    assert result.metrics["tid"] == result.name.rsplit("_", 1)[-1]
    assert isinstance(result.filesystem, pafs.LocalFileSystem)
    assert result.filesystem.get_file_info(result.path).type == pafs.FileType.Directory

    grid = tune.Tuner(
        _report_trial_id,
        param_space={"x": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
    ).fit()
    ids = sorted(r.metrics["tid"] for r in grid)
    assert ids == sorted(r.metrics["trial_id"] for r in grid) and len(set(ids)) == 2


def test_result_filesystem_of_a_uri_path():
    assert isinstance(Result(path="/tmp/x").filesystem, pafs.LocalFileSystem)
    assert isinstance(Result(path="file:///tmp/x").filesystem, pafs.LocalFileSystem)
