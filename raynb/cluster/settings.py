"""Every ``RAYNB_*`` environment variable, in one place: its default, its unit and why.

A variable is read through :func:`get` at the moment it matters (not at import), so a
test or a launcher that sets it before starting a process changes that process only.
``tests/cluster/test_settings.py`` fails on a ``RAYNB_*`` name used anywhere in ``raynb/`` that is
not declared here, and ``docs/environment.md`` is generated from this table
(``python -m raynb.cluster.settings --markdown``).

Two kinds: ``user`` settings are for people to set (documented); ``internal`` ones are
how a parent process hands facts to the processes it starts (a worker's id, the head's
address), listed so that nobody reuses their names.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Setting:
    """One environment variable: ``name``, its ``default`` (already parsed), ``parse``
    (str -> value; a ValueError falls back to the default), a one-line ``doc`` saying
    why it exists, and its ``kind`` ("user" or "internal")."""

    name: str
    default: Any
    parse: Callable[[str], Any]
    doc: str
    kind: str = "user"


def _flag(raw: str) -> bool:
    return raw.strip().lower() in ("1", "true", "yes", "on")


def _nonneg_float(raw: str) -> float:
    value = float(raw)
    # NaN, negative, or past what a wait can take (a thread's join(inf) raises OverflowError)
    if not 0 <= value <= threading.TIMEOUT_MAX:
        raise ValueError(raw)
    return value


def _nonneg_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError(raw)
    return value


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError(raw)
    return value


_TABLE = [
    # where things live
    Setting(
        "RAYNB_HOME",
        None,
        str,
        "the cluster's state directory (connection file, logs, jobs); default `~/.raynb`",
    ),
    Setting(
        "RAYNB_STORAGE_PATH",
        None,
        str,
        "where run and experiment directories go when a run names "
        "none; default `~/raynb_results` (as Ray's `~/ray_results`)",
    ),
    Setting(
        "RAYNB_PROGRESS",
        None,
        str,
        "how runs show progress: `widget`, `text` or `none`; default: a widget in Jupyter, text elsewhere",
    ),
    Setting(
        "RAYNB_KEEP_CLUSTER",
        False,
        _flag,
        "`1` keeps the cluster a script started running after the script exits (then `raynb stop` ends it)",
    ),
    # the head
    Setting(
        "RAYNB_WORKER_IDLE_TIMEOUT_S",
        60.0,
        _nonneg_float,
        "seconds an extra worker (beyond the warm count) stays idle before it is retired",
    ),
    Setting(
        "RAYNB_NODE_TIMEOUT_S",
        5.0,
        _nonneg_float,
        "seconds of silence after which the head holds a "
        "remote node lost and fails its ranks' attempts (at least 1); half this when its node "
        "agent and all its workers fell silent together (a host or network gone)",
    ),
    Setting(
        "RAYNB_IDLE_HEARTBEAT_S",
        2.0,
        _nonneg_float,
        "seconds between the heartbeats the head asks of a remote node whose workers ran nothing "
        "for 10 s (1 to 10; 1: every second, as a busy node's); such a node is held lost after "
        "RAYNB_NODE_TIMEOUT_S times this. An idle worker (between tasks) beats this often too",
    ),
    Setting(
        "RAYNB_CLIENT_GRACE_S",
        10.0,
        _nonneg_float,
        "seconds a script's cluster, asked to stop once no one else uses it, stays up after "
        "another client last connected, submitted or attached (one about to submit its first run)",
    ),
    Setting(
        "RAYNB_REPLACEMENT_WAIT_S",
        300.0,
        _nonneg_float,
        "seconds a restarting run waits for a node with room for its lost ranks before it fails",
    ),
    Setting(
        "RAYNB_DATA_WAIT_S",
        120.0,
        _nonneg_float,
        "seconds the head waits for a run's in-memory data to reach the nodes its ranks were placed on",
    ),
    Setting(
        "RAYNB_MAX_MESSAGE_BYTES",
        2**30,
        _positive_int,
        "the most one protocol message may carry, "
        "its frames together, in bytes (a function and the data it captured, a return value)",
    ),
    Setting(
        "RAYNB_MAX_WORKING_DIR_BYTES",
        100 * 2**20,
        _positive_int,
        "the largest `raynb submit` working directory, packed, in bytes (set on both sides)",
    ),
    Setting(
        "RAYNB_MAX_WORKING_DIR_FILES",
        100_000,
        _positive_int,
        "the most files and directories a "
        "`raynb submit` working directory may hold (checked while it is unpacked)",
    ),
    Setting(
        "RAYNB_RECORD_MAX_REPORTS",
        2_000,
        _nonneg_int,
        "reports a run record carries when the "
        "asker does not say (the dashboard, `raynb.get_run` of a run directory it cannot read)",
    ),
    Setting(
        "RAYNB_SPARE_FILES",
        True,
        _flag,
        "`0` turns off the run directories the head makes ahead "
        "(an ext4 workaround where creating a file is slow in some block groups)",
    ),
    # the node agent and workers
    Setting(
        "RAYNB_WORKER_SCHED",
        "batch",
        str,
        "`batch` (Linux `SCHED_BATCH`, the default) or `other` "
        "for the workers: `other` where other programs keep every core busy",
    ),
    Setting(
        "RAYNB_PRELOAD",
        None,
        str,
        "frameworks the zygote imports before it forks workers, comma-separated "
        "(`lightning`, `transformers`, `tensorflow`; `raynb start --preload`): their first fit "
        "starts warm, the start is slower and the node holds them in memory. `tensorflow` starts "
        "the TensorFlow workers' own zygote with the node (never the torch zygote)",
    ),
    Setting(
        "RAYNB_HEAD_GRACE_S",
        60.0,
        _nonneg_float,
        "seconds a node agent waits on a silent head "
        "whose connection is open before it ends its workers (a busy head is not a dead one; "
        "at least 1)",
    ),
    Setting(
        "RAYNB_NODE_IP",
        None,
        str,
        "the IP a node agent and its workers bind on and announce; "
        "default: the interface that routes to the head (loopback locally)",
    ),
    Setting(
        "RAYNB_SHM_THRESHOLD_BYTES",
        16 * 2**20,
        int,
        "captured values at least this large go to "
        "the ranks through shared memory once per node; 0 turns that off",
    ),
    Setting(
        "RAYNB_DATA_VIA_SOCKET",
        False,
        _flag,
        "`1` sends in-memory data to local node agents "
        "through their socket too, as to remote ones (a test and benchmark switch)",
    ),
    # the notebook and runs
    Setting(
        "RAYNB_MAX_REPORT_BYTES",
        2**20,
        _positive_int,
        "the largest one `report()`'s metrics may be, "
        "in bytes, checked on the rank (set where the cluster starts)",
    ),
    Setting(
        "RAYNB_CALLBACK_DRAIN_S",
        30.0,
        _nonneg_float,
        "seconds a run's end waits for its callbacks (TensorBoard, MLflow, ...) to drain their queue",
    ),
    Setting(
        "RAYNB_CLIENT_RECONNECT_S",
        600.0,
        _nonneg_float,
        "seconds a client following a run keeps trying to reach a head that went silent",
    ),
    # handed by a parent to the processes it starts
    Setting(
        "RAYNB_KEY",
        None,
        str,
        "the cluster key (hex) a process was started with; for a "
        "loopback head, `raynb node --key` defaults to it",
        kind="internal",
    ),
    Setting("RAYNB_ADDRESS", None, str, "the head's address, given to workers and jobs", kind="internal"),
    Setting("RAYNB_NODE_ID", None, str, "the node a worker runs on", kind="internal"),
    Setting("RAYNB_WORKER_ID", None, str, "the worker's own id (names its transfers)", kind="internal"),
    Setting(
        "RAYNB_WORKER_KIND",
        None,
        str,
        "the worker's kind when a kind's zygote forked it (`tensorflow`; unset: torch)",
        kind="internal",
    ),
    Setting("RAYNB_LOG_DIR", ".", str, "where a node agent's workers write their logs", kind="internal"),
    Setting(
        "RAYNB_RDZV_DIR",
        None,
        str,
        "the node agent's private directory for process groups' file stores",
        kind="internal",
    ),
    Setting(
        "RAYNB_WORKERS_TMP",
        None,
        str,
        "the node agent's directory of its workers' temp directories",
        kind="internal",
    ),
    Setting("RAYNB_JOB_ID", None, str, "the `raynb submit` job a driver process belongs to", kind="internal"),
    Setting("RAYNB_CURVE_SERVER_PUBLIC", None, str, "the head's CurveZMQ public key (z85)", kind="internal"),
    Setting("RAYNB_CURVE_PUBLIC", None, str, "this process's CurveZMQ public key (z85)", kind="internal"),
    Setting("RAYNB_CURVE_SECRET", None, str, "this process's CurveZMQ secret key (z85)", kind="internal"),
]

SETTINGS: dict[str, Setting] = {s.name: s for s in _TABLE}


def get(name: str) -> Any:
    """The value of ``name`` in this process's environment, parsed, or its default when it
    is unset, empty or does not parse (a bad value must never stop a process from starting).

    Raises:
        KeyError: ``name`` is not declared above.
    """
    setting = SETTINGS[name]
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return setting.default
    try:
        return setting.parse(raw)
    except (TypeError, ValueError, OverflowError):
        _say_ignored(name, raw, setting.default)
        return setting.default


_IGNORED: set = set()


def _say_ignored(name: str, raw: str, default) -> None:
    """Say once per process and value that ``name``'s value is not used (on stderr: the
    process's log for the head and nodes), so a typo is not silently the default."""
    if (name, raw) in _IGNORED:
        return
    _IGNORED.add((name, raw))
    print(
        f"raynb: {name}={raw[:40]!r} is not a valid value (see docs/environment.md); "
        f"using the default {default!r}",
        file=sys.stderr,
    )


def markdown() -> str:
    """The environment reference page (``docs/environment.md``)."""
    out = [
        "# Environment variables",
        "",
        "Generated from `raynb/cluster/settings.py` (`python -m raynb.cluster.settings --markdown`).",
        "A value that does not parse falls back to the default.",
        "",
    ]
    for kind, title in (("user", "Settings"), ("internal", "Set by raynb for the processes it starts")):
        out += [f"## {title}", "", "| variable | default | what it is for |", "| --- | --- | --- |"]
        for s in _TABLE:
            if s.kind == kind:
                default = "" if s.default is None else f"`{s.default}`"
                out.append(f"| `{s.name}` | {default} | {s.doc} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover - a docs generator
    if sys.argv[1:] == ["--markdown"]:
        print(markdown(), end="")
    else:
        print("usage: python -m raynb.cluster.settings --markdown", file=sys.stderr)
        sys.exit(2)
