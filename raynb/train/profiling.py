"""``torch.profiler`` on every rank, for a bounded window (``RunConfig(profile=...)``,
``%%ray_train --profile``, ``raynb.train.torch.profile()``).

The window is ``torch.profiler.schedule(wait, warmup, active, repeat=1)``, by default
wait=1, warmup=1, active=3: the step up to the first ``report()`` (model building,
DDP's first broadcast, the first batch) is skipped, the next warms the profiler up,
and the three after it are recorded. A run-wide profile is stepped by ``report()``
(one report, one step, as Ray's examples step once per iteration); a
``profile()`` block by its ``prof.step()``. A complete window needs
wait+warmup+active steps; the profiler then stops, so the rest of the run costs nothing.

Each rank writes into ``<run dir>/profile/``:

- ``rank_<r>.json``: the Chrome trace of the recorded steps (Perfetto, chrome://tracing);
- ``rank_<r>_top.json``: the top operators by self CPU time (by self CUDA time too on
  GPU runs), every collective (``c10d::``, ``gloo:``, ``nccl:``), the mean step time and
  a note when the window was cut short, read back by ``Result.profile``.

A run that ends (or fails) before the window is complete stops the profiler, writes
what was recorded and says so in a note. Nothing here runs, and ``torch.profiler`` is
not imported, unless a run asks for a profile: ``report()`` only looks up one key.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

from ..cluster.worker import task_context
from ..cluster.worker.remote_error import hide_from_tracebacks

DEFAULTS = {"wait": 1, "warmup": 1, "active": 3, "record_shapes": False, "profile_memory": False,
            "with_stack": False, "top": 15}
PROFILE_DIR = "profile"
STATE_KEY = "profiler"  # task_context.state() key of the run-wide profiler that report() steps
COMM_PREFIXES = ("c10d::", "gloo:", "nccl:", "record_param_comms")
_STEP_EVENT = "ProfilerStep*"


def profile_options(value, where: str = "RunConfig(profile=...)") -> dict | None:
    """The full options for ``value``: None for None / False, the defaults for True, the
    defaults updated by a dict (keys as :data:`DEFAULTS`).

    Raises:
        TypeError: ``value`` is not a bool, dict or None.
        ValueError: an unknown key, or a count that is not an integer (wait, warmup >= 0,
            active, top >= 1).
    """
    if value is None or value is False:
        return None
    if value is True:
        return dict(DEFAULTS)
    if not isinstance(value, dict):
        raise TypeError(f"{where}: give True or a dict such as dict(wait=1, warmup=1, active=3), "
                        f"got {type(value).__name__}: {value!r:.80}")
    unknown = sorted(set(value) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"{where}: unknown option(s) {', '.join(map(repr, unknown))}; "
                         f"the options are {', '.join(DEFAULTS)}")
    options = {**DEFAULTS, **value}
    for key, least in (("wait", 0), ("warmup", 0), ("active", 1), ("top", 1)):
        n = options[key]
        if not isinstance(n, int) or isinstance(n, bool) or n < least:
            raise ValueError(f"{where}: {key}={n!r} must be an integer >= {least}")
    for key in ("record_shapes", "profile_memory", "with_stack"):
        if not isinstance(options[key], bool):
            raise ValueError(f"{where}: {key}={options[key]!r} must be True or False")
    return options


def parse_schedule(text: str) -> dict:
    """``"wait,warmup,active"`` (``%%ray_train --profile 0,1,5``) as profile options.

    Raises:
        ValueError: not three integers separated by commas (the message shows the form).
    """
    parts = [p.strip() for p in text.split(",")]
    try:
        wait, warmup, active = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"--profile {text!r}: give wait,warmup,active as three integers, e.g. "
                         "--profile 1,1,3 (or --profile alone for that default)") from None
    return profile_options({"wait": wait, "warmup": warmup, "active": active}, f"--profile {text}")


class RankProfiler:
    """One rank's ``torch.profiler.profile`` over the window of ``options``.

    Args:
        task (dict): the running task (``task_context.current()``): rank, path, attempt.
        options (dict): from :func:`profile_options`.
        unit (str): what a step is, for the notes ("reports", "prof.step() calls").
    """

    def __init__(self, task: dict, options: dict, unit: str = "reports"):
        self.task, self.options, self.unit = task, options, unit
        self.rank = task["rank"]
        self.dir = Path(task["path"]) / PROFILE_DIR
        self.steps = 0
        self.window_done = False
        self.trace: str | None = None
        self.ops: list[dict] = []
        self.step_ms: float | None = None
        self.recorded_steps = 0
        self.errors: list[str] = []
        self.cuda = False
        self._prof = None
        self._finished = False

    @property
    def needed(self) -> int:
        """Steps a complete window takes (wait + warmup + active)."""
        o = self.options
        return o["wait"] + o["warmup"] + o["active"]

    def start(self) -> "RankProfiler":
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # kineto prints a line per start/stop otherwise
        o = self.options
        activities = [ProfilerActivity.CPU]
        self.cuda = bool(self.task.get("use_gpu")) and torch.cuda.is_available()
        if self.cuda:
            activities.append(ProfilerActivity.CUDA)
        with warnings.catch_warnings():  # warmup=0 warns; the options are the user's choice
            warnings.simplefilter("ignore")
            window = schedule(wait=o["wait"], warmup=o["warmup"], active=o["active"], repeat=1)
        self._prof = profile(activities=activities, schedule=window, on_trace_ready=self._on_trace_ready,
                             record_shapes=o["record_shapes"], profile_memory=o["profile_memory"],
                             with_stack=o["with_stack"])
        self._prof.start()
        return self

    def step(self) -> None:
        """End one step of the window (a no-op once the window is written)."""
        if self.window_done or self._prof is None:
            return
        self.steps += 1
        self._prof.step()
        if self.window_done:  # the last active step ended: stop hooking every op
            self._stop()

    def _stop(self) -> None:
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.stop()

    def _on_trace_ready(self, prof) -> None:
        """torch's on_trace_ready: the Chrome trace and the top operators, written at once."""
        self.window_done = True
        self._write_stub()
        final = self.dir / f"rank_{self.rank}.json"
        tmp = self.dir / f".rank_{self.rank}.json.tmp"
        try:
            self.dir.mkdir(exist_ok=True, mode=0o700)   # in the run directory: never made again
            prof.export_chrome_trace(str(tmp))
            os.replace(tmp, final)
            self.trace = final.name
        except Exception as e:  # noqa: BLE001 - a profile must never fail the training run
            self.errors.append(f"the trace was not written: {type(e).__name__}: {e}")
        try:
            self.ops, self.step_ms, self.recorded_steps = top_operators(prof.key_averages(), self.options["top"],
                                                                        self.cuda)
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"no operator summary: {type(e).__name__}: {e}")
        if self.steps >= self.needed:
            self._write_summary(None)

    def finish(self) -> str | None:
        """Stop the profiler (a window cut short: what was recorded is written) and
        write the summary; returns the note for a short window, else None. Idempotent."""
        if self._finished:
            return None
        self._finished = True
        note = None
        if self._prof is not None:
            self._write_stub()
        try:
            self._stop()  # in the active steps: on_trace_ready writes what they recorded
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"torch.profiler did not stop cleanly: {type(e).__name__}: {e}")
        if self.steps < self.needed:
            note = self.short_note()
            self._write_summary(note)
        for error in self.errors:
            sys.stderr.write(f"raynb profile (rank {self.rank}): {error}\n")
        return note

    def short_note(self) -> str:
        o = self.options
        unit = self.unit if self.steps != 1 else self.unit.replace("reports", "report").replace("calls", "call")
        head = (f"profile: the run made {self.steps} {unit}; the schedule needs "
                f"wait+warmup+active={o['wait']}+{o['warmup']}+{o['active']}={self.needed}")
        if self.trace:
            return f"{head}; wrote what it had ({PROFILE_DIR}/{self.trace} and one per rank)"
        fix = (f"--profile 0,0,{max(self.steps, 1)} or RunConfig(profile=dict(wait=0, warmup=0, "
               f"active={max(self.steps, 1)}))")
        return (f"{head}; recording starts after {o['wait'] + o['warmup']} {self.unit}, so it recorded "
                f"nothing (wrote {PROFILE_DIR}/rank_{self.rank}_top.json only); for a run this short use {fix}")

    def _write_stub(self) -> None:
        """A summary that says the flush began, replaced when it ends: what stays of a rank
        killed meanwhile (a peer failed and its grace ran out, the OOM killer)."""
        self._write_summary(f"profile: rank {self.rank} ended while writing its profile, after {self.steps} "
                            f"{self.unit}; its files may be missing or cut short", flushing=True)

    def _write_summary(self, note: str | None, flushing: bool = False) -> None:
        summary = {"flushing": flushing, "rank": self.rank, "attempt": self.task.get("attempt", 0), "time": time.time(),
                   "schedule": {k: self.options[k] for k in ("wait", "warmup", "active")},
                   "unit": self.unit, "steps": self.steps, "needed": self.needed,
                   "complete": self.steps >= self.needed, "recorded_steps": self.recorded_steps,
                   "trace": self.trace, "cuda": self.cuda, "step_ms": self.step_ms, "ops": self.ops,
                   "note": note, "errors": self.errors}
        try:
            self.dir.mkdir(exist_ok=True, mode=0o700)   # in the run directory: never made again
            tmp = self.dir / f".rank_{self.rank}_top.json.tmp"
            tmp.write_text(json.dumps(summary))
            os.replace(tmp, self.dir / f"rank_{self.rank}_top.json")
        except OSError as e:
            self.errors.append(f"the summary was not written: {e}")


def top_operators(averages, n: int, cuda: bool = False) -> tuple[list[dict], float | None, int]:
    """(rows, mean step ms, recorded steps) of ``prof.key_averages()``: the ``n`` operators
    with the most self CPU time (and self CUDA time when ``cuda``), plus every collective.
    Times are in µs, summed over the recorded steps."""
    events = [e for e in averages if e.key != _STEP_EVENT]
    step = next((e for e in averages if e.key == _STEP_EVENT), None)
    keep = {e.key for e in sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:n]}
    if cuda:
        keep |= {e.key for e in sorted(events, key=lambda e: e.self_device_time_total, reverse=True)[:n]}
    keep |= {e.key for e in events if e.key.startswith(COMM_PREFIXES)}
    rows = []
    for e in sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True):
        if e.key not in keep:
            continue
        row = {"name": e.key, "calls": e.count, "self_cpu_us": round(e.self_cpu_time_total, 3),
               "cpu_total_us": round(e.cpu_time_total, 3)}
        if cuda:
            row.update(self_cuda_us=round(e.self_device_time_total, 3),
                       cuda_total_us=round(e.device_time_total, 3))
        rows.append(row)
    if step is None or not step.count:
        return rows, None, 0
    return rows, round(step.cpu_time_total / step.count / 1000, 3), step.count


class Profiled:
    """The training function, profiled on its rank (what ``execute_run`` ships for a
    ``RunConfig(profile=...)`` run). ``__wrapped__`` gives the worker ``fn``'s signature."""

    def __init__(self, fn, options: dict):
        self.__wrapped__ = fn
        self.options = options

    @hide_from_tracebacks  # the rank's traceback starts at the user's code
    def __call__(self, *args):
        task = task_context.current()
        profiler = RankProfiler(task, self.options).start()
        state = task_context.state()
        state[STATE_KEY] = profiler
        try:
            return self.__wrapped__(*args)
        finally:
            state.pop(STATE_KEY, None)
            _finish(profiler)


def _finish(profiler: RankProfiler) -> None:
    """Flush ``profiler`` and send rank 0's note, with a cancel held off until done: a
    cancel (SIGINT from the worker's I/O thread) raises as soon as this returns."""
    with _sigint_held():
        note = profiler.finish()
        if note and profiler.rank == 0:
            try:
                task_context.emit({"kind": "note", "text": note})
            except RuntimeError:  # the task already ended
                pass


@contextmanager
def _sigint_held():
    """Block SIGINT on the main thread for the block (pending, not lost): a rank
    cancelled because a peer failed still writes its trace."""
    held = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    if held:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def step_on_report() -> None:
    """Called by every ``report()``: steps the run-wide profiler, if there is one."""
    profiler = task_context.state().get(STATE_KEY)
    if profiler is not None:
        profiler.step()


@contextmanager
def profile(**options):
    """Profile a block of the training function on this rank (``raynb.train.torch.profile``).

    ``with profile() as prof:`` then ``prof.step()`` once per iteration; the window and
    the files are those of ``RunConfig(profile=...)`` (see this module), ``report()``
    does not step it. A block that ends before the window is complete writes what it
    recorded, and rank 0 notes it.

    Args:
        **options: ``wait``, ``warmup``, ``active`` (steps), ``record_shapes``,
            ``profile_memory``, ``with_stack`` (bools, as ``torch.profiler.profile``),
            ``top`` (operators kept per rank).

    Raises:
        RuntimeError: outside a training function, or in a run profiled already by
            ``RunConfig(profile=...)`` / ``--profile`` (torch runs one profiler at a time).
        ValueError: an unknown option or a bad count.
    """
    task = task_context.current()
    if task is None:
        raise RuntimeError("profile() was called outside a training function. Call it inside "
                           "train_loop_per_worker (TorchTrainer) or a %%ray_train cell.")
    opts = profile_options(dict(options), "profile(...)")
    if task_context.state().get(STATE_KEY) is not None:
        raise RuntimeError("profile(): this run is profiled already (RunConfig(profile=...) or "
                           "%%ray_train --profile), and torch runs one profiler at a time; use one of them")
    profiler = RankProfiler(task, opts, unit="prof.step() calls").start()
    try:
        yield profiler
    finally:
        _finish(profiler)
