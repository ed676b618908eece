"""Elastic runs (Ray Train v2's ``ScalingConfig(num_workers=(min, max))``), the head's side.

An elastic run's spec holds ``num_workers`` = its max, ``min_workers`` and
``elastic_resize_monitor_interval_s``. What is elastic about it:

- **start**: the scheduler (``scheduler.elastic_size``) places any count from min up to
  what the cluster can hold (the max preferred, forking up to each node's
  ``max_workers`` as for a fixed run); below min it waits and the pane says for what.
- **shrink**: after a failure it restarts at once on the workers idle now (at least min),
  from the latest checkpoint, without waiting for replacements; FailureConfig counts
  the failure as for a fixed run.
- **grow**: :class:`GrowMonitor` (docs/elastic.md).

Each attempt's world size is the count placed (``Run.world_size``); ranks see it in
``get_context().get_world_size()`` and every report carries it as ``world_size``.
"""

from __future__ import annotations

import time

from . import scheduler
from .run import Run


def is_elastic(spec: dict) -> bool:
    return spec.get("min_workers") is not None


def problem(spec: dict) -> str | None:
    """What is wrong with an elastic spec's sizes (one line naming the fix), or None."""
    if not is_elastic(spec):
        return None
    lo, hi = spec.get("min_workers"), spec.get("num_workers")
    if not isinstance(lo, int) or isinstance(lo, bool) or not 1 <= lo <= hi:
        return f"num_workers=({lo!r}, {hi!r}): min_workers must be an integer from 1 to max_workers={hi}"
    interval = spec.get("elastic_resize_monitor_interval_s", 60.0)
    if not isinstance(interval, (int, float)) or not interval >= 0:
        return f"elastic_resize_monitor_interval_s={interval!r} must be a number of seconds >= 0"
    return None


def request(spec: dict, now: bool = False) -> scheduler.Request:
    """The scheduler's request for a run (fixed or elastic). ``now``: an elastic restart
    after a failure, placed on the workers idle now."""
    return scheduler.Request(
        int(spec["num_workers"]),
        bool(spec.get("use_gpu")),
        spec.get("placement_strategy") or "PACK",
        min_workers=spec.get("min_workers"),
        now=now,
        kind=spec.get("worker_kind") or "torch",
    )


def submit_request(spec: dict) -> scheduler.Request:
    """What ``scheduler.check`` must find room for at submit: an elastic run's min (it
    starts with what there is when its max is more than the cluster holds)."""
    req = request(spec)
    if req.min_workers is None:
        return req
    return scheduler.Request(req.min_workers, req.use_gpu, req.strategy, kind=req.kind)


def waiting_note(run: Run, decision: scheduler.Fork) -> str:
    """The pane's line for an elastic run below its min."""
    lo = int(run.spec["min_workers"])
    free = max(0, lo - decision.unplaceable)
    return (
        f"{free} of min {lo} workers free; waiting for {decision.unplaceable} more "
        f"(num_workers=({lo}, {run.spec['num_workers']}))"
    )


def resize_note(
    run: Run, old: int, new: int, why: str, start_from: str | None, took_s: float | None = None
) -> dict:
    """The note event of a resize: ``"shrank 4 -> 2 ranks (node n2 lost: no heartbeat);
    resumed from checkpoint_000003 in 0.4 s"``. ``took_s``: seconds from the old ranks'
    stop (the resize, or the failure seen) to the new ranks' start."""
    verb = "grew" if new > old else "shrank"
    took = f" in {took_s:.1f} s" if took_s is not None else ""
    text = f"{verb} {old} -> {new} ranks ({why}); " + (
        f"resumed from {start_from}{took}" if start_from else f"started over{took} (no checkpoint yet)"
    )
    return {"kind": "note", "text": text, "resize": {"from": old, "to": new, "seconds": took_s}}


def capped_note(run: Run, placed: int, capacity: int) -> str | None:
    """Said once, at an elastic run's first start: its max is more than the cluster holds."""
    hi = int(run.spec["num_workers"])
    if run.attempt or hi <= capacity:
        return None
    return (
        f"num_workers=({run.spec['min_workers']}, {hi}): this cluster holds at most {capacity} "
        f"workers; started with {placed} (it grows when a node with room joins)"
    )


def no_checkpoint_warning(run: Run) -> dict | None:
    """The note, said once per run, that an elastic run with no checkpoint to resume from
    restarts its function from the beginning at each resize (None: said already, or it
    has one)."""
    if run.spec.get("_no_checkpoint_warned") or _latest_index(run) is not None:
        return None
    if run.spec.get("resume_from_checkpoint"):
        return None
    run.spec["_no_checkpoint_warned"] = True
    return {
        "kind": "note",
        "text": (
            "warning: this elastic run has saved no checkpoint, so each resize restarts its "
            "function from the beginning; report one (report(metrics, "
            "checkpoint=Checkpoint.from_directory(d))) and resume from get_checkpoint()"
        ),
    }


class GrowMonitor:
    """Ray Train v2's resize monitor: every ``elastic_resize_monitor_interval_s`` a healthy
    elastic run below its max asks the scheduler how many ranks it could have now (its own
    workers counted free). When that is more, it is marked to grow and its ranks are told
    to hold at each ``report()`` (a ``report_gate``) until the head has every rank's report
    of that index: at the first such report that committed a checkpoint (or the first once
    another interval passed) the ranks are stopped there, inside ``report()`` and outside
    any collective, and the run restarts on the larger group from that checkpoint (the
    controller's ``resize``); at the others they go on. No work a checkpoint covers is
    lost, and no rank is killed in a collective. A run that makes no report within two
    more intervals is resized by a cancel.

    Called by the controller's tick, per running run (``RunController.grow_monitor``), and
    by the head per report of a run marked to grow (:meth:`on_report`).

    Args:
        registry: the head's nodes and workers (``snapshot()``).
        resize: ``resize(run)``, the controller's.
        emit: ``emit(run, event)`` to the run's clients.
        clock: ``time.monotonic`` (injectable).
        gate: ``gate(run, content)`` sends a ``report_gate`` to each of the run's ranks
            (None: no gate; the run is resized by a cancel after its next checkpoint).
    """

    def __init__(self, registry, resize, emit, clock=time.monotonic, gate=None):
        self._registry, self._resize, self._emit, self._clock = registry, resize, emit, clock
        self._gate = gate

    def __call__(self, run: Run) -> None:
        spec = run.spec
        if (
            not is_elastic(spec)
            or run.finishing
            or not run.ranks
            or len(run.ranks) >= int(spec["num_workers"])
        ):
            return
        now = self._clock()
        interval = float(spec.get("elastic_resize_monitor_interval_s", 60.0))
        attempt, due = spec.get("_grow_due") or (None, 0.0)
        if attempt != run.attempt:  # a new attempt: its first look one interval after its start
            spec["_grow_due"] = (run.attempt, now + interval)
            spec.pop("_grow", None)
            return
        grow = spec.get("_grow")
        if grow is not None:
            gated = self._gate is not None
            # Without a gate: at the next checkpoint, by a cancel. With one, on_report stops the
            # ranks at a report; a run that makes none for another interval: by a cancel.
            due_by = grow["deadline"] + (grow["wait"] if gated else 0.0)
            if (not gated and _latest_index(run) != grow["latest"]) or now >= due_by:
                self._grow_now(run)
            return
        if now < due:
            return
        spec["_grow_due"] = (run.attempt, now + interval)
        size = self._room(run)
        if size > len(run.ranks):
            self._mark(run, size, now, interval)

    def _mark(self, run: Run, size: int, now: float, interval: float) -> None:
        more = size - len(run.ranks)
        run.spec["_grow"] = {
            "to": size,
            "latest": _latest_index(run),
            "deadline": now + max(interval, 1.0),
            "wait": max(interval, 1.0),
            "why": f"room for {more} more rank{'s' if more > 1 else ''}",
        }
        self._emit(
            run,
            {
                "kind": "note",
                "text": (f"room for {size} ranks (now {len(run.ranks)}): growing at the next checkpoint"),
            },
        )
        warning = no_checkpoint_warning(run)
        if warning:
            self._emit(run, warning)
        if self._gate is not None:
            self._gate(run, {"gate": True})

    def on_report(self, run: Run, index: int, committed: bool) -> None:
        """Rank reports of index ``index`` are in (``committed``: they committed a
        checkpoint): once every rank's is, a run marked to grow stops there (a checkpoint
        committed, or past its deadline) or its held ranks go on."""
        grow = run.spec.get("_grow")
        if grow is None or self._gate is None or run.state != "RUNNING":
            return
        held = grow.setdefault("held", {})
        if committed:
            grow.setdefault("committed", set()).add(index)
        if any(run.report_counts.get(r, 0) < index for r in range(len(run.ranks))):
            return  # a rank has not made this report yet
        ranks = held.pop(index, set())
        all_held = len(ranks) == len(run.ranks)
        if all_held and (index in grow.get("committed", ()) or self._clock() >= grow["deadline"]):
            if self._room(run) > len(run.ranks):
                self._gate(run, {"gate": True, "index": index, "stop": True})
                return self._resize(run, at_report=True)
            run.spec.pop("_grow")  # the room went to another run meanwhile: no restart for nothing
            return self._gate(run, {"gate": False})
        if ranks:
            self._gate(run, {"gate": True, "index": index, "stop": False})

    def held(self, run: Run, rank: int, index: int) -> None:
        """Rank ``rank`` holds at its report ``index`` for the head's word (a gated report)."""
        grow = run.spec.get("_grow")
        if grow is not None:
            grow.setdefault("held", {}).setdefault(index, set()).add(rank)

    def _grow_now(self, run: Run) -> None:
        if self._room(run) > len(run.ranks):
            self._resize(run)
        else:  # the room went to another run meanwhile: no restart for nothing
            run.spec.pop("_grow")
            if self._gate is not None:
                self._gate(run, {"gate": False})

    def _room(self, run: Run) -> int:
        """How many ranks the run could have now, its own workers counted free."""
        size = scheduler.elastic_size(request(run.spec), self._registry.snapshot(), own=tuple(run.ranks))
        return size if isinstance(size, int) else 0


def _latest_index(run: Run):
    latest = run.store.latest if run.store is not None else None
    return latest["index"] if latest else None
