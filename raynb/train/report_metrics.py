"""A report's metrics as plain JSON-able values, within a cap on their size.

A report becomes a row of the run's ``result.json`` and ``progress.csv`` and its latest
``metrics`` in ``run.json``, and rank 0's is relayed to the notebook: the head encodes it
three or four times, on its one thread. A report of 100 MiB (a long string, a big tensor's
values) held that thread for 10-25 s on a 2-core machine: long enough for the node agents
to take the head for dead and stop their workers, failing every run on the cluster. So a
report whose values would take more than ``MAX_REPORT_BYTES`` is refused where it is made,
on the rank, before anything is converted or sent (a tensor is sized before it becomes a
list), with what to do instead. Ray Train keeps such data in a checkpoint too: its metrics
are a result row.
"""

from __future__ import annotations

import collections
import numbers
import os
from typing import Any


def _max_report_bytes() -> int:
    """The most a report's values may take (bytes, about their JSON size):
    $RAYNB_MAX_REPORT_BYTES when it is a positive integer, else 1 MiB (a bad value must not
    break ``import raynb`` in every notebook and worker)."""
    try:
        n = int(os.environ.get("RAYNB_MAX_REPORT_BYTES") or 0)
    except ValueError:
        n = 0
    return n if n > 0 else 1 << 20


MAX_REPORT_BYTES = _max_report_bytes()
_NUMBER_BYTES = 8
# Values whose repr is at least as long as they have items (bytes, characters, elements).
_REPR_AT_LEAST_LEN = (bytes, bytearray, set, frozenset, collections.deque)


class ReportTooLarge(ValueError):
    """A report's metrics are over ``MAX_REPORT_BYTES``."""


def plain_metrics(metrics: dict) -> dict:
    """``metrics`` with tensors and numpy values as numbers and lists (``ray.train.report``'s
    metrics are a result row), str keys.

    Raises:
        ReportTooLarge: (a ValueError) they would take more than ``MAX_REPORT_BYTES``; the
            message names the largest entry (and the one that passed the cap, if another)
            and what to do instead.
    """
    left = [MAX_REPORT_BYTES]
    out = {}
    sizes: dict[str, tuple[int, str]] = {}  # key -> (bytes, type name): the largest is named
    for k, v in metrics.items():
        key = str(k)
        before = left[0] - len(key)
        left[0] = before
        try:
            out[key] = _plain(v, left)
            if left[0] < 0:
                raise ReportTooLarge
        except ReportTooLarge:
            sizes[key] = (before - left[0], type(v).__name__)
            raise ReportTooLarge(
                f"report(): the metrics are over the {MAX_REPORT_BYTES:,} bytes a report may carry "
                f"({_largest(sizes, key)}). A report "
                "is a row of result.json and progress.csv: save arrays, tensors and long text in a "
                "checkpoint (report(metrics, checkpoint=...)) or a file under "
                "get_context().get_trial_dir(); RAYNB_MAX_REPORT_BYTES (set where the cluster starts) "
                "raises the cap"
            ) from None
        sizes[key] = (before - left[0], type(v).__name__)
    return out


def _largest(sizes: dict, last: str) -> str:
    """Which entry to shrink: the largest, and the one that passed the cap if another."""
    big = max(sizes, key=lambda k: sizes[k][0])
    said = f"{big!r} is a {sizes[big][1]} of at least {sizes[big][0]:,} bytes"
    return said if big == last else f"{said}; {last!r}, a {sizes[last][1]}, passed the cap"


def _plain(value: Any, left: list) -> Any:
    """One value as a plain one; ``left[0]`` (bytes still allowed) is lowered by its size."""
    if value is None or isinstance(value, (bool, int, float)):
        left[0] -= _NUMBER_BYTES
        return value
    if isinstance(value, str):
        left[0] -= len(value)
        return value
    if isinstance(value, numbers.Number):
        left[0] -= _NUMBER_BYTES
        return float(value) if not isinstance(value, numbers.Integral) else int(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            left[0] -= len(str(k))
            out[str(k)] = _plain(v, left)
            if left[0] < 0:
                raise ReportTooLarge
        return out
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            out.append(_plain(v, left))
            if left[0] < 0:
                raise ReportTooLarge
        return out
    nbytes = getattr(value, "nbytes", None)  # numpy arrays, torch tensors: sized before converted
    if isinstance(nbytes, int) and nbytes > left[0]:
        left[0] -= nbytes
        raise ReportTooLarge
    item = getattr(value, "item", None)
    numel = getattr(value, "numel", None) or getattr(value, "size", None)
    if callable(item):
        try:
            n = numel() if callable(numel) else numel
            if n == 1:
                return _plain(item(), left)
        except ReportTooLarge:
            raise
        except Exception:  # noqa: BLE001 - fall through to tolist/repr
            pass
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return _plain(tolist(), left)
    # Bytes, a set...: a repr at least a character per item, never made when too long (not
    # every sized value: range(10**9)'s repr is short).
    length = len(value) if isinstance(value, _REPR_AT_LEAST_LEN) else 0
    if length > left[0]:
        left[0] -= length
        raise ReportTooLarge
    text = repr(value)
    left[0] -= len(text)
    return text
