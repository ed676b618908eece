"""A trial's report as Ray's ``MLflowLoggerCallback`` logs it: Ray's result dict, flattened
(``config/lr``, ``nested/acc``), every value that ``float()`` takes as a metric.

raynb's reports carry the user's metrics and ``training_iteration``, ``time_this_iter_s``,
``time_total_s``, ``timestamp``, ``trial_id``; Ray's result dict also holds the trial's
``config``, ``done``, ``iterations_since_restore`` and ``time_since_restore``, which are
filled in here (Ray's ``pid``, ``hostname``, ``node_ip`` and ``date`` are not known in the
driver and are left out; strings were not metrics anyway).
"""

from __future__ import annotations

import math

from ..train.experiment_callback import flatten


def ray_result(
    result: dict, config: dict | None, done: bool = False, restored_at: tuple[int, float] = (0, 0.0)
) -> dict:
    """``result`` completed with the keys Ray's result dict has.

    Args:
        result: a report as raynb's callbacks get it.
        config: the trial's config (``config/*``).
        done: the trial's last report (Ray's ``done``).
        restored_at: (training_iteration, time_total_s) when the trial last (re)started.
    """
    out = dict(result)
    out.setdefault("config", dict(config or {}))
    out.setdefault("done", done)
    it = out.get("training_iteration")
    if isinstance(it, (int, float)):
        out.setdefault("iterations_since_restore", it - restored_at[0])
    total = out.get("time_total_s")
    if isinstance(total, (int, float)):
        out.setdefault("time_since_restore", total - restored_at[1])
    return out


def metrics_of(result: dict) -> dict:
    """Ray's metrics of a result: flattened, each value ``float()`` takes (bools, numbers,
    numeric strings), as Ray's ``_MLflowLoggerUtil.log_metrics`` keeps them."""
    out = {}
    for key, value in flatten(result).items():
        try:
            out[key] = float(value)
        except (TypeError, ValueError, OverflowError):
            continue
    return out


def step_of(result: dict, iteration: int) -> int:
    """The MLflow step of a result: Ray's ``timesteps_total`` or ``training_iteration``."""
    for key in ("timesteps_total", "training_iteration"):
        value = result.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value:
            return int(value)
    return int(iteration)
