"""One run as a :class:`Result`: submit it and follow it (``raynb.client``), then
build the ``Result`` and raise for a failed run.

``TorchTrainer.fit()`` and ``%%ray_train`` call :func:`execute_run`;
``raynb.get_run`` and ``raynb.attach`` read or follow a run by name.
"""

from __future__ import annotations

from ..client import bulk, views
from ..client.connection import get_client
from ..client.runs import fetch_record, latest_live_run
from ..client.submit_and_follow import (
    RunOutcome,
    build_submission,
    cancel_unfollowed,
    follow_run,
    submit_run_accepted,
)
from ..cluster.protocol import messages
from ..cluster.protocol.run_states import RUN_TERMINAL as TERMINAL
from ..errors import RunError
from .callback_list import CallbackList
from .config import Result, RunConfig, ScalingConfig, result_from_record
from .fit_with_callbacks import follow_with_callbacks
from .profiling import Profiled, profile_options


def _total_epochs(config, epochs):
    if epochs:
        return int(epochs)
    if isinstance(config, dict) and isinstance(config.get("epochs"), int):
        return config["epochs"]
    return None


def outcome_result(outcome: RunOutcome):
    """(Result, rank 0's return value) of a followed run.

    Raises:
        RunError: the run FAILED or was CANCELLED (the error carries the ``Result``).
    """
    result = result_from_record(outcome.record, outcome.reports)
    if outcome.state != "FINISHED":
        raise result.error
    return result, outcome.value()


def execute_run(
    fn,
    config=None,
    scaling_config: ScalingConfig | None = None,
    run_config: RunConfig | None = None,
    *,
    sources: dict | None = None,
    captured: dict | None = None,
    epochs: int | None = None,
    all_ranks: bool = False,
    name_prefix: str = "TorchTrainer",
    extra: dict | None = None,
):
    """Run ``fn(config)`` on ``scaling_config.num_workers`` warm ranks and wait for it.

    Args:
        sources: notebook cell sources by file name, for the ranks' tracebacks.
        captured: names whose values travel with the function (a cell's globals).
        epochs: the total for the progress bars (default ``config["epochs"]``).
        all_ranks: show every rank's output, not only rank 0's.
        extra: keys added to the ``submit_run`` spec (``resume``, ``resume_from_checkpoint``).

    Returns:
        (Result, rank 0's return value).

    Raises:
        RunError: a rank raised or died (the error carries the ``Result``).
        UnpicklableError: something ``fn`` reads cannot be shipped; nothing was sent.
        TypeError: ``run_config.callbacks`` holds something that is not a Callback; nothing was sent.
        CallbackError: a callback with ``fail_on_error = True`` raised; the run was cancelled.
        KeyboardInterrupt: the run was interrupted; every rank was cancelled first. Its
            ``run_path`` is the run directory (``Result.from_path`` reads the cancelled run).
    """
    scaling_config = scaling_config or ScalingConfig()
    run_config = run_config or RunConfig()
    callbacks = CallbackList(run_config.callbacks or ())  # a TypeError before anything ships
    fn, profile = _profiled(fn, run_config)
    spec, payload = build_submission(
        fn,
        config,
        scaling_config,
        run_config,
        sources=sources,
        captured=captured,
        name_prefix=name_prefix,
        extra=extra,
    )
    client, accepted = _submit(spec, payload)
    view = _shown_view(client, spec, accepted, scaling_config, run_config, config, epochs)
    outcome = _follow(client, spec, accepted, view, callbacks, all_ranks)
    bulk.forget(spec["run_id"])  # it ended: its node agents freed its shared memory too
    if profile is not None and run_config.verbose:
        _show_profile(
            outcome.record.get("path"), outcome.record.get("world_size") or _max_workers(scaling_config)
        )
    return outcome_result(outcome)


def _profiled(fn, run_config: RunConfig):
    """``fn`` wrapped for ``run_config.profile`` (unwrapped first: restore() of a profiled
    run's function.pkl), and the profile options (None: not profiled)."""
    fn = fn.__wrapped__ if isinstance(fn, Profiled) else fn
    profile = profile_options(run_config.profile)
    return (Profiled(fn, profile) if profile is not None else fn), profile


def _submit(spec: dict, payload):
    """Send the run to the head: (the client, the head's acceptance).

    Raises:
        ValueError: the head refused the run (its shared-memory data is freed here).
    """
    client = get_client()
    try:
        return client, submit_run_accepted(client, spec, payload)
    except ValueError:
        bulk.forget(spec["run_id"])  # refused: no run will free its shared-memory data
        raise


def _shown_view(
    client, spec: dict, accepted: dict, scaling_config: ScalingConfig, run_config: RunConfig, config, epochs
):
    """The run's progress view, displayed. An interrupt while it is made cancels the run.

    Raises:
        RunInterrupted: a Ctrl-C landed first (its ``run_path`` is the run directory).
        SystemExit: the script is ending (the run was cancelled).
    """
    try:
        view = views.run_view(
            accepted["name"],
            _max_workers(scaling_config),
            _total_epochs(config, epochs),
            run_config.verbose,
            raises=True,
        )
        view.display()  # (widgets: tens of ms, when an early Ctrl-C lands)
    except (KeyboardInterrupt, SystemExit) as e:
        try:
            cancel_unfollowed(client, spec["run_id"], e, "before the run was followed")
        except KeyboardInterrupt as ki:
            ki.run_path = accepted.get("path")
            raise
    return view


def _follow(client, spec: dict, accepted: dict, view, callbacks: CallbackList, all_ranks: bool):
    """Follow the accepted run to its end (through the callbacks if any); its RunOutcome.

    Raises:
        KeyboardInterrupt: with ``run_path`` set, for %%ray_train to bind the cancelled run's Result.
    """
    try:
        if callbacks:
            return follow_with_callbacks(client, spec, accepted, view, callbacks, all_ranks)
        return follow_run(
            client,
            spec["run_id"],
            view,
            all_ranks=all_ranks,
            name=accepted["name"],
            path=accepted.get("path"),
        )
    except KeyboardInterrupt as e:
        e.run_path = accepted.get("path")
        raise


def _max_workers(scaling_config) -> int:
    """The most ranks the run may have: ``num_workers``, or an elastic run's max."""
    return getattr(scaling_config, "max_workers", scaling_config.num_workers)


def _show_profile(path: str | None, world_size: int) -> None:
    """The profiled run's per-rank table, in the notebook (or printed)."""
    from .profile_result import RunProfile

    prof = RunProfile.from_run_dir(path, world_size)
    if prof is None:
        views.show(
            f"profile: nothing to show in {path}/profile (no rank reached the function, or the "
            "head's run directory cannot be read from this machine)"
        )
    else:
        views.show(prof)


def get_run(name: str) -> Result:
    """A run's :class:`Result` by name, live or finished (``metrics_dataframe``,
    ``checkpoint``, ``best_checkpoints``, ``error``, ``logs``, ``state``).

    Raises:
        KeyError: the cluster knows no run of that name (the message lists recent ones).
        ClusterError: no cluster can be reached or started.
    """
    return result_from_record(fetch_record(messages.GET_RUN, name))


def attach(name: str | None = None, verbose: int = 1, all_ranks: bool = False) -> Result:
    """Follow a run from this process until it ends, with the live progress pane
    (``%ray_attach NAME``): reconnect to a run after a kernel restart, or from a
    second notebook. Interrupting the cell detaches (the run goes on).

    Args:
        name (str | None): the run's name; None attaches to the newest active run.
        verbose (int): 0 shows no progress pane.
        all_ranks (bool): show every rank's output, not only rank 0's.

    Returns:
        The run's :class:`Result` (its ``error`` set when it failed; nothing is raised
        for a failed run, as it was not started here).

    Raises:
        KeyError: no run of that name.
    """
    if name is None:
        name = latest_live_run()
    record = fetch_record(messages.ATTACH_RUN, name)
    if record["state"] in TERMINAL:
        return result_from_record(record)
    history = []
    t0 = record.get("started") or record.get("submitted")
    if record.get("started"):
        history.append({"kind": "state", "state": "RUNNING", "time": t0})
    for row in record.get("reports", []):
        history.append({"kind": "report", "rank": 0, "metrics": row, "time": row.get("timestamp")})
    for f in record.get("failures", []):
        history.append({"kind": "note", "text": f"restart after: {f.get('message', f)}"})
    view = views.run_view(record["name"], record.get("world_size") or 1, verbose=verbose, history=history)
    view.display()
    try:
        outcome = follow_run(
            get_client(),
            record["run_id"],
            view,
            all_ranks=all_ranks,
            reports=list(record.get("reports", [])),
            cancel_on_interrupt=False,
            path=record.get("path"),
        )
    except KeyboardInterrupt:
        view.finish()
        print(f"detached from run {name!r}; it goes on (raynb.attach({name!r}) to follow it again)")
        raise
    try:
        result, _ = outcome_result(outcome)
    except RunError as e:
        return e.result
    return result
