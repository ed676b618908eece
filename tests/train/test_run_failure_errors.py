"""A failed run raises Ray Train 2.60's classes and stays raynb's RunError: a rank's
exception is ``WorkerGroupError`` with ``worker_failures`` (the rank's own exception object
when it unpickles, else a stand-in with its type name and traceback), a run the head ended is
``ControllerError``; Tune's ``Result.error`` and ``UserCallback.after_exception`` get the
same ``{rank: exception}``. Real runs on the shared cluster."""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time

import cloudpickle
import pytest

import raynb
from raynb.errors import ClusterError, RayTrainError, RunError
from raynb.train import (
    ControllerError,
    RunConfig,
    ScalingConfig,
    TrainingFailedError,
    UserCallback,
    WorkerGroupError,
)
from raynb.train.torch import TorchTrainer
from raynb.train.train_errors import RemoteRankError

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class BadBatch(ValueError):
    """A user's own exception class, with an attribute beside its message."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step

    def __reduce__(self):
        return (self.__class__, (self.args[0], self.step))


class _Recorder(UserCallback):
    def __init__(self):
        self.exceptions = []

    def after_exception(self, run_context, worker_exceptions):
        self.exceptions.append(dict(worker_exceptions))


def _fit(fn, num_workers=2, callbacks=None, config=None):
    return TorchTrainer(
        fn,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=num_workers),
        run_config=RunConfig(verbose=0, callbacks=callbacks or []),
    ).fit()


def _rank1_raises_bad_batch(config):
    from raynb import train

    if train.get_context().get_world_rank() == 1:
        raise BadBatch("bad batch", step=3)


def test_a_ranks_exception_comes_back_as_itself_in_a_worker_group_error(cluster):
    recorder = _Recorder()
    with pytest.raises(WorkerGroupError) as info:
        _fit(_rank1_raises_bad_batch, callbacks=[recorder])
    err = info.value
    # Ray's view
    assert isinstance(err, TrainingFailedError) and isinstance(err, RayTrainError)
    assert list(err.worker_failures) == [1]
    exc = err.worker_failures[1]
    assert type(exc) is BadBatch and exc.step == 3 and str(exc) == "bad batch"
    # raynb's view, unchanged
    assert isinstance(err, RunError) and err.rank == 1 and err.state == "FAILED"
    assert err.errors[0]["exc_type"] == "BadBatch" and "_rank1_raises_bad_batch" in err.remote_traceback
    assert str(err).startswith(f"run {err.run_name!r} failed: rank 1 raised BadBatch: bad batch")
    assert err.result is not None and err.result.error is err
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is WorkerGroupError and again.run_name == err.run_name and str(again) == str(err)
    assert type(again.worker_failures[1]) is BadBatch
    # the callback got the same mapping
    assert len(recorder.exceptions) == 1
    assert list(recorder.exceptions[0]) == [1] and type(recorder.exceptions[0][1]) is BadBatch


def _unpicklable_error(config):
    import threading as _threading

    from raynb import train

    if train.get_context().get_world_rank() == 0:
        raise RuntimeError("holds a lock", _threading.Lock())


def test_an_exception_that_does_not_pickle_comes_back_as_a_stand_in_with_its_traceback(cluster):
    with pytest.raises(WorkerGroupError) as info:
        _fit(_unpicklable_error)
    exc = info.value.worker_failures[0]
    assert type(exc) is RemoteRankError and exc.exc_type == "RuntimeError" and exc.rank == 0
    assert "holds a lock" in str(exc) and "_unpicklable_error" in exc.traceback


def _rank1_dies(config):
    from raynb import train

    if train.get_context().get_world_rank() == 1:
        os._exit(3)


def test_a_dead_rank_is_a_worker_failure(cluster):
    with pytest.raises(WorkerGroupError) as info:
        _fit(_rank1_dies)
    exc = info.value.worker_failures[1]
    assert type(exc) is RemoteRankError and exc.exc_type is None and exc.rank == 1
    assert "3" in str(exc)  # its exit code


def _sleeps(config):
    from raynb import train

    if train.get_context().get_world_rank() == 0:
        open(config["marker"], "w").close()
    time.sleep(60)


def test_a_run_the_head_ended_is_a_controller_error(cluster, tmp_path):
    from raynb.client.connection import connection_of_its_own
    from raynb.cluster.protocol import messages

    marker = str(tmp_path / "started")
    out = {}

    def fit():
        try:
            _fit(_sleeps, num_workers=1, config={"marker": marker})
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            out["error"] = e

    t = threading.Thread(target=fit)
    t.start()
    deadline = time.monotonic() + 30
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    other = connection_of_its_own()  # the notebook's own one follows the run in the thread
    try:
        running = [r for r in other.status()["runs"] if r["state"] == "RUNNING"]
        assert len(running) == 1, running
        other.send(messages.CANCEL_RUN, {"run_id": running[0]["run_id"]})
        t.join(30)
    finally:
        other.close()
    err = out.get("error")
    assert isinstance(err, ControllerError) and not isinstance(err, WorkerGroupError), repr(err)
    assert isinstance(err, RunError) and err.state == "CANCELLED"
    assert isinstance(err.controller_failure, ClusterError) and "cancelled" in str(err.controller_failure)
    assert type(pickle.loads(pickle.dumps(err))) is ControllerError


def test_tunes_result_error_maps_each_failed_rank(cluster, tmp_path):
    from raynb import tune

    grid = tune.Tuner(
        TorchTrainer(_rank1_raises_bad_batch, scaling_config=ScalingConfig(num_workers=2)),
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    err = grid[0].error
    assert isinstance(err, WorkerGroupError) and isinstance(err, RunError)
    assert type(err.worker_failures[1]) is BadBatch and err.worker_failures[1].step == 3


def test_a_record_read_back_names_the_same_classes():
    """What Result.from_path / the Tune table build from a run record (no cluster)."""
    from raynb.train.train_errors import run_error

    err = run_error("r", [{"rank": 2, "exc_type": "KeyError", "message": "'x'", "exc_pickle": "!!"}])
    assert isinstance(err.worker_failures[2], RemoteRankError)  # broken pickle: the stand-in
    head = run_error("r", [{"message": "no node can hold 8 workers"}])
    assert isinstance(head, ControllerError) and "8 workers" in str(head.controller_failure)
    assert raynb.RunError is RunError
