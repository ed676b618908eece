"""A driver ``Callback`` that sets Ray's ``SHOULD_CHECKPOINT`` in ``on_trial_result``.

In Ray the controller then saves the trial (a class ``Trainable``'s ``save()``) before its
next step. Here the trial runs on a rank ahead of the driver, so the request travels to it
(``request_checkpoint`` to the head, ``checkpoint_requested`` to the run's ranks), and a
class ``Trainable`` checkpoints after the step it is in when the request arrives (the next
report). A function trainable checkpoints only when it reports one (as in Ray): that is
said once, and it may read ``raynb.train.session.checkpoint_requested()`` itself.
"""

from __future__ import annotations

import queue

from ..cluster.protocol import messages
from ..train.callback_list import note_function_should_checkpoint


def is_class_trainable(fn) -> bool:
    """Whether a trial function runs a class ``Trainable`` (``trainable.class_trainable``),
    also inside a wrapper (``Profiled``: its ``fn``)."""
    return bool(
        getattr(fn, "_raynb_class_trainable", False)
        or getattr(getattr(fn, "fn", None), "_raynb_class_trainable", False)
    )


def ask(requests: queue.SimpleQueue | None, by_run: dict, runner, client) -> int:
    """Send the checkpoint requests the callbacks' thread queued (trial ids) for trials
    still running; returns how many were sent."""
    if requests is None:
        return 0
    running = None
    sent = 0
    while True:
        try:
            trial_id = requests.get_nowait()
        except queue.Empty:
            return sent
        if not is_class_trainable(runner.fn):
            note_function_should_checkpoint()
            continue
        running = running or {t.trial_id: t for t in by_run.values()}
        trial = running.get(trial_id)
        if trial is not None and trial.run_id:
            client.send(messages.REQUEST_CHECKPOINT, {"run_id": trial.run_id})
            sent += 1
