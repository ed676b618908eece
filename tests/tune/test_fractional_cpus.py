"""A trial's fractional CPU request (``tune.with_resources(f, {"cpu": 0.5})``), as Ray
reads it: trials pack that many to a CPU (two of 0.5 on one CPU), and each trial's rank
runs floor(cpus), at least 1, torch threads (Ray's OMP_NUM_THREADS rule)."""

from __future__ import annotations

from raynb import tune
from raynb.tune.trainable_util import _scaling_of
from raynb.tune.tuner import _plan_concurrency


def _status(workers: int, cpus: int) -> dict:
    return {
        "workers": [{}] * workers,
        "nodes": [{"num_workers": workers, "max_workers": workers, "cpus": cpus}],
    }


def test_fractional_cpus_pack_trials_as_ray_does():
    half = _scaling_of({"cpu": 0.5})
    assert half.cpus_requested == 0.5 and half.cpus_per_worker == 1
    # 2 CPUs hold four trials of half a CPU (Ray's count), bounded by the 4 warm workers.
    assert _plan_concurrency(_status(4, 2), half, None) == (4, 4)
    assert _plan_concurrency(_status(8, 2), half, None) == (8, 4)
    one_and_half = _scaling_of({"cpu": 1.5})
    assert one_and_half.cpus_per_worker == 1
    assert _plan_concurrency(_status(4, 4), one_and_half, None) == (4, 2)
    two = _scaling_of({"cpu": 2})
    assert _plan_concurrency(_status(4, 4), two, None) == (4, 2)
    assert callable(tune.with_resources(lambda config: None, {"cpu": 0.25}))
