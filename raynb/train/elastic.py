"""Elastic training's ``num_workers=(min_workers, max_workers)``, checked as Ray Train v2
checks it (the head's side of elastic runs is ``cluster/head/elastic.py``)."""

from __future__ import annotations

import numbers


def check_num_workers(n):
    """``n`` if it is an int >= 1 or a ``(min, max)`` pair of them with min <= max (a list
    is taken as a pair and returned as a tuple).

    Raises:
        ValueError: anything else, naming the values.
    """

    def whole(x) -> bool:
        return isinstance(x, numbers.Integral) and not isinstance(x, bool)

    if isinstance(n, (tuple, list)):
        if len(n) != 2 or not all(whole(x) for x in n):
            raise ValueError(
                f"ScalingConfig(num_workers={n!r}): an elastic num_workers is a pair of "
                "integers (min_workers, max_workers), e.g. (2, 4)"
            )
        lo, hi = int(n[0]), int(n[1])
        if lo < 1:
            raise ValueError(f"ScalingConfig(num_workers={n!r}): min_workers={lo} must be >= 1")
        if lo > hi:
            raise ValueError(
                f"ScalingConfig(num_workers={n!r}): min_workers={lo} must be <= max_workers={hi}"
            )
        return (lo, hi)
    if not whole(n) or n < 1:
        raise ValueError(
            f"ScalingConfig(num_workers={n!r}): num_workers must be an integer >= 1, "
            "or a (min_workers, max_workers) pair for an elastic run"
        )
    return n


def recorded_num_workers(record: dict):
    """The ``num_workers`` a restore of a run gives it again, from its ``run.json``: an
    elastic run's ``(min_workers, max_workers)`` (it stays elastic), else its world size."""
    if record.get("min_workers") is not None and record.get("max_workers") is not None:
        return (int(record["min_workers"]), int(record["max_workers"]))
    return record.get("world_size") or 1


def elastic_interval(record: dict) -> dict:
    """``elastic_resize_monitor_interval_s`` of a restored elastic run, as a keyword (or none)."""
    t = record.get("elastic_resize_monitor_interval_s")
    if t is None or record.get("min_workers") is None:
        return {}
    return {"elastic_resize_monitor_interval_s": float(t)}
