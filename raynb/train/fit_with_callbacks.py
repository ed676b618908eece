"""A ``TorchTrainer.fit()`` as an experiment of one trial, for ``RunConfig(callbacks=...)``.

:func:`follow_with_callbacks` follows the run as ``execute_run`` does, and feeds its
events (rank 0's reports, committed checkpoints, the end) to a :class:`CallbackList`
through a wrapper of the run's view: the callbacks see a trial whose ``trial_id`` is
``<run id>_00000`` and whose ``path`` is the run directory.
"""

from __future__ import annotations

from ..client.submit_and_follow import RunOutcome, follow_run
from ..cluster.protocol import messages
from .callback_list import INTERRUPTED_DRAIN_S, CallbackList, drain_timeout_s
from .experiment_callback import CallbackError, TrialSnapshot


class _RelayView:
    """The run's view, also posting its events to the callbacks. A ``fail_on_error``
    callback that raised cancels the run (the error is raised once the run ended)."""

    def __init__(self, view, callbacks: CallbackList, trial: TrialSnapshot, client):
        self._view, self._callbacks, self._trial, self._client = view, callbacks, trial, client
        self.error: CallbackError | None = None

    def handle(self, event: dict) -> None:
        self._view.handle(event)
        kind = event.get("kind")
        try:
            if kind == "report" and event.get("rank") == 0:
                self._trial.results.append(event["metrics"])
                self._callbacks.on_trial_result(self._trial, event["metrics"])
            elif kind == "checkpoint" and event.get("path"):
                self._trial.checkpoint = event["path"]
                self._callbacks.on_checkpoint(self._trial, event["path"], event.get("metrics"))
        except CallbackError as e:
            if self.error is None:
                self.error = e
                self._client.send(messages.CANCEL_RUN, {"run_id": self._trial.run_id})

    def __getattr__(self, name):
        return getattr(self._view, name)


def first_error_line(errors: list) -> str:
    """The first error of a run's ``errors`` as one line of at most 300 characters."""
    e = errors[0] if errors else {}
    text = (
        f"{e['exc_type']}: {e.get('message', '')}" if e.get("exc_type") else str(e.get("message", "failed"))
    )
    return (text.splitlines() or ["failed"])[0][:300]


def _start_callbacks(spec: dict, accepted: dict, callbacks: CallbackList) -> TrialSnapshot:
    """Set ``callbacks`` up for the run as one RUNNING trial of a one-trial experiment,
    as Ray Train does; returns that trial."""
    params = spec.get("params")
    trial = TrialSnapshot(
        f"{spec['run_id'][:8]}_00000",
        params if isinstance(params, dict) else {"config": params},
        "RUNNING",
        accepted.get("path"),
        run_id=spec["run_id"],
    )
    callbacks.setup(
        experiment_name=accepted.get("name"),
        experiment_path=accepted.get("path"),
        kind="TorchTrainer",
        metric=None,
        mode=None,
        num_samples=1,
        total_num_samples=1,
    )
    callbacks.on_trial_start(trial)
    return trial


def follow_with_callbacks(
    client, spec: dict, accepted: dict, view, callbacks: CallbackList, all_ranks: bool = False
) -> RunOutcome:
    """Follow a submitted run (as ``follow_run``), calling ``callbacks`` as it goes.

    Returns:
        The run's :class:`RunOutcome`, after the callbacks caught up (at most
        ``$RAYNB_CALLBACK_DRAIN_S`` s).

    Raises:
        CallbackError: a ``fail_on_error`` callback raised (the run was cancelled).
        KeyboardInterrupt, ClusterError: as ``follow_run``; the callbacks get
            ``on_experiment_end`` first (the trial no end event: it did not end), and
            are waited for at most ``INTERRUPTED_DRAIN_S``.
    """
    trial = _start_callbacks(spec, accepted, callbacks)
    relay = _RelayView(view, callbacks, trial, client)
    try:
        outcome = follow_run(
            client,
            spec["run_id"],
            relay,
            all_ranks=all_ranks,
            name=accepted.get("name"),
            path=accepted.get("path"),
        )
    except BaseException:
        callbacks.on_experiment_end()
        callbacks.close(min(INTERRUPTED_DRAIN_S, drain_timeout_s()))
        raise
    trial.status = "TERMINATED" if outcome.state == "FINISHED" else "ERROR"
    if trial.status == "ERROR":
        errors = outcome.record.get("errors") or [{"message": f"the run ended {outcome.state}"}]
        trial.error = first_error_line(errors)
        trial.errors = errors  # UserCallback.after_exception's exceptions
    trial.checkpoint = outcome.record.get("checkpoint") or trial.checkpoint
    try:
        callbacks.on_trial_end(trial)
    except CallbackError as e:
        relay.error = relay.error or e
    callbacks.on_experiment_end()
    callbacks.close()
    if relay.error is not None:
        raise relay.error
    callbacks.check()
    return outcome
