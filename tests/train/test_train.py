"""Training configuration checked without a cluster: ScalingConfig's arguments, an oversized
report (the runs themselves are in test_train_integration.py)."""

from __future__ import annotations

import sys

import cloudpickle
import pytest

from raynb.train.config import ScalingConfig

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize(
    "kwargs,error,says",
    [
        ({"use_gpu": "yes"}, TypeError, "ScalingConfig(use_gpu='yes'): use_gpu must be True or False"),
        ({"use_gpu": 2}, TypeError, "use_gpu must be True or False"),
        ({"resources_per_worker": "x"}, TypeError, "give a dict of resource names to amounts >= 0"),
        ({"resources_per_worker": {"CPU": -1}}, ValueError, "{'CPU': -1}): 'CPU' must be an amount >= 0"),
        ({"resources_per_worker": {"CPU": float("nan")}}, ValueError, "'CPU' must be an amount >= 0"),
        ({"resources_per_worker": {"CPU": "1"}}, TypeError, "give a dict of resource names to amounts >= 0"),
        (
            {"resources_per_worker": {"GPU": 1}},
            ValueError,
            "asks for GPUs but use_gpu is False: set use_gpu=True",
        ),
        ({"use_gpu": True, "resources_per_worker": {"GPU": 0}}, ValueError, "gives each worker 0 GPUs"),
        ({"timeout_s": "5"}, ValueError, "ScalingConfig(timeout_s='5') must be a positive number of seconds"),
        ({"timeout_s": -5}, ValueError, "must be a positive number of seconds"),
    ],
)
def test_a_scaling_config_of_the_wrong_kind_is_refused_naming_the_argument(kwargs, error, says):
    # "yes", a string and {"GPU": 1} without use_gpu were accepted: the run then failed
    # naming another value, or ran on CPU without a word.
    with pytest.raises(error) as ei:
        ScalingConfig(num_workers=2, **kwargs)
    assert says in str(ei.value)


def test_scaling_config_keeps_what_ray_accepts():
    import numpy as np

    assert ScalingConfig(use_gpu=np.bool_(False)).use_gpu is False
    assert ScalingConfig(use_gpu=True, resources_per_worker={"CPU": 2, "GPU": 1}).resources_per_worker == {
        "CPU": 2,
        "GPU": 1,
    }
    assert ScalingConfig(resources_per_worker={"CPU": 0.5, "memory": 2**30}).use_gpu is False


def test_an_oversized_report_names_its_largest_entry_and_is_never_printed_whole():
    from raynb.train.report_metrics import MAX_REPORT_BYTES, ReportTooLarge, plain_metrics

    third = MAX_REPORT_BYTES // 3
    with pytest.raises(ReportTooLarge) as ei:  # the cap passed by a small entry after a big one
        plain_metrics({"big": "x" * (2 * third), "mid": "y" * (third // 2), "last": list(range(third // 8))})
    assert f"('big' is a str of at least {2 * third:,} bytes; 'last', a list, passed the cap)" in str(
        ei.value
    ), ei.value

    class HugeBytes(bytes):  # bytes, a set, a deque: a repr at least as long, never made when too long
        def __repr__(self):
            raise AssertionError("repr() of an oversized value was built")

    import collections

    n = MAX_REPORT_BYTES + 1
    for value in (HugeBytes(n), b"\0" * n, set(range(n)), collections.deque(range(n))):
        with pytest.raises(ReportTooLarge, match=rf"'blob' is a {type(value).__name__} of at least"):
            plain_metrics({"loss": 0.5, "blob": value})
    assert plain_metrics({"b": b"ab", "s": {1}}) == {"b": "b'ab'", "s": "{1}"}  # small ones: their repr
    # A value of many items but a short repr is not refused for its length.
    assert plain_metrics({"steps": range(MAX_REPORT_BYTES + 1)}) == {
        "steps": f"range(0, {MAX_REPORT_BYTES + 1})"
    }
