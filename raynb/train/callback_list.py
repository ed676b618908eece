"""Running an experiment's callbacks off the training path: :class:`CallbackList`.

The driver (``TorchTrainer.fit()``'s event loop, the Tune controller) posts each event
with an O(1) call: a snapshot of the trial goes on a queue. One thread per experiment
takes them off and calls every callback in order, so a callback that sleeps or talks to a
slow server holds up neither the driver nor, ever, a rank. At the end the driver waits for
the queue to drain, at most ``$RAYNB_CALLBACK_DRAIN_S`` seconds.
"""

from __future__ import annotations

import queue
import sys
import threading
import traceback

from .checkpoint import Checkpoint
from .experiment_callback import CallbackError, TrialSnapshot, check_callbacks

# How long fit() waits, at the end, for the callbacks to handle the events still queued (s).
DRAIN_TIMEOUT_S = 30.0
# The same after an interrupt or a lost head: the cell should end promptly (s).
INTERRUPTED_DRAIN_S = 2.0
_CLOSE = object()


def drain_timeout_s() -> float:
    """``$RAYNB_CALLBACK_DRAIN_S`` (seconds, >= 0), else :data:`DRAIN_TIMEOUT_S`."""
    from ..cluster import settings

    return settings.get("RAYNB_CALLBACK_DRAIN_S")  # NaN, inf, negative: the default, not 0


_SHOULD_CHECKPOINT_NOTED = []


def note_function_should_checkpoint() -> None:
    """Said once: a Callback set SHOULD_CHECKPOINT for a trial of a function trainable,
    which (as in Ray) checkpoints only when it reports one."""
    if _SHOULD_CHECKPOINT_NOTED:
        return
    _SHOULD_CHECKPOINT_NOTED.append(True)
    print(
        "raynb: a Callback set result['should_checkpoint'] (SHOULD_CHECKPOINT) for a function "
        "trainable; a function checkpoints when it calls report(..., checkpoint=...): check "
        "raynb.train.session.checkpoint_requested() there to honour the request. A class "
        "Trainable checkpoints after its next step",
        file=sys.stderr,
    )


class CallbackList:
    """An experiment's callbacks, run in order on a thread of their own.

    The ``on_*`` methods are the driver's: each posts one event and returns at once.
    With no callbacks every method does nothing (and no thread starts).

    Raises (from ``__init__``):
        TypeError: an item of ``callbacks`` is not a ``raynb.tune.Callback``.
    """

    def __init__(self, callbacks=()):
        self.callbacks = check_callbacks(callbacks)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._iteration = 0
        self._fatal: CallbackError | None = None  # a fail_on_error callback raised
        self._fatal_raised = False
        self._skipped: set[int] = set()  # callbacks that raised: not called again
        self._trials: dict[str, TrialSnapshot] = {}  # the thread's: latest snapshot per trial
        # Trials a callback set SHOULD_CHECKPOINT for (ids, from the callbacks' thread): the
        # Tune controller asks each for a checkpoint (tune/controller.py).
        self.checkpoint_requests: queue.SimpleQueue = queue.SimpleQueue()

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    # -- the driver's side ----------------------------------------------------------------
    def setup(self, **info) -> None:
        self._post("setup", None, info)

    def on_trial_start(self, trial) -> None:
        self._post("on_trial_start", trial, {})

    def on_trial_result(self, trial, result: dict) -> None:
        self._post("on_trial_result", trial, {"result": dict(result)})

    def on_checkpoint(self, trial, path: str | None, metrics: dict | None = None) -> None:
        if path:
            ckpt = Checkpoint(path)
            # rank 0's metrics of the report that carried it: UserCallback pairs the two
            ckpt._report_metrics = metrics
            self._post("on_checkpoint", trial, {"checkpoint": ckpt})

    def on_trial_end(self, trial) -> None:
        """``on_trial_complete`` (TERMINATED, STOPPED) or ``on_trial_error`` (ERROR); nothing
        for a trial that ends PENDING (a PBT exploit) or PAUSED (an interrupt)."""
        if trial.status in ("TERMINATED", "STOPPED"):
            self._post("on_trial_complete", trial, {})
        elif trial.status == "ERROR":
            self._post("on_trial_error", trial, {})

    def on_experiment_end(self) -> None:
        self._post("on_experiment_end", None, {}, check=False)

    def close(self, timeout: float | None = None) -> None:
        """Wait until the callbacks handled every event posted, at most ``timeout`` s
        (default :func:`drain_timeout_s`); past that they go on in the background (said on
        stderr). Raises nothing: :meth:`check` does."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._queue.put(_CLOSE)
        timeout = drain_timeout_s() if timeout is None else timeout
        thread.join(timeout)
        if thread.is_alive():
            sys.stderr.write(
                f"warning: the run's callbacks have not caught up after {timeout:g}s "
                f"({self._queue.qsize()} events waiting); they go on in the background "
                "(RAYNB_CALLBACK_DRAIN_S sets how long fit() waits)\n"
            )
            sys.stderr.flush()

    def check(self) -> None:
        """Raise the :class:`CallbackError` of a ``fail_on_error`` callback that raised (once)."""
        if self._fatal is not None and not self._fatal_raised:
            self._fatal_raised = True
            raise self._fatal

    def _post(self, method: str, trial, kwargs: dict, check: bool = True) -> None:
        if not self.callbacks:
            return
        if check:
            self.check()
        self._iteration += 1
        snap = TrialSnapshot.of(trial) if trial is not None else None
        self._queue.put((method, snap, kwargs, self._iteration))
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="raynb-callbacks", daemon=True)
            self._thread.start()

    # -- the thread's side ----------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is _CLOSE:
                return
            method, snap, kwargs, iteration = item
            if snap is not None:
                self._trials[snap.trial_id] = snap
            if method == "on_experiment_end":
                self._call("flush", {})
                self._call(method, {"trials": list(self._trials.values())})
            elif method == "setup":
                self._trials = {}
                self._call(method, kwargs)
            else:
                self._call(
                    method,
                    {"iteration": iteration, "trials": list(self._trials.values()), "trial": snap, **kwargs},
                )
                if method == "on_trial_result" and kwargs["result"].get("should_checkpoint"):
                    self.checkpoint_requests.put(snap.trial_id)  # the controller asks the trial
            if self._queue.empty():
                self._call("flush", {})

    def _call(self, method: str, kwargs: dict) -> None:
        for i, cb in enumerate(self.callbacks):
            if i in self._skipped:
                continue
            try:
                getattr(cb, method)(**kwargs)
            except Exception as e:  # noqa: BLE001 - any callback bug: shown, never the run's
                self._failed(i, cb, method, e)

    def _failed(self, i: int, cb, method: str, e: Exception) -> None:
        self._skipped.add(i)
        name = type(cb).__name__
        if getattr(cb, "fail_on_error", False):
            if self._fatal is None:
                self._fatal = CallbackError(
                    f"callback {name}.{method}() raised {type(e).__name__}: {e}; "
                    f"the run was stopped ({name}.fail_on_error is True)"
                )
                self._fatal.__cause__ = e
            return
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        sys.stderr.write(
            f"warning: callback {name}.{method}() raised, and {name} is skipped for the rest "
            f"of this run (the training goes on; set {name}.fail_on_error = True to stop the "
            f"run instead):\n{tb}"
        )
        sys.stderr.flush()
