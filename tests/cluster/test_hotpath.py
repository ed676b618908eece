"""The warm loop's hot path (issue 15): what is relayed, when run files are written,
and what a worker keeps after a run. Properties, not timings (``benchmarks/`` has those)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

import raynb
from raynb import RunConfig, ScalingConfig
from raynb.client.connection import get_client
from raynb.client.submit_and_follow import build_submission, follow_run, submit_run_accepted

QUIET = RunConfig(verbose=0)


class _Recorder:
    """A run view that keeps every event the client was sent."""

    def __init__(self):
        self.events: list[dict] = []

    def handle(self, event: dict) -> None:
        self.events.append(event)

    def display(self) -> None:
        pass

    def finish(self) -> None:
        pass


def _epochs(config):
    import time as _time

    from raynb.train import report

    for epoch in range(config["epochs"]):
        report({"epoch": epoch, "loss": 1.0 / (epoch + 1)})
        _time.sleep(config.get("sleep", 0))


def test_only_rank0_reports_are_relayed_and_the_others_as_a_progress_counter(warm):
    spec, payload = build_submission(
        _epochs, {"epochs": 3, "sleep": 0.15}, ScalingConfig(num_workers=4), QUIET
    )
    client = get_client()
    accepted = submit_run_accepted(client, spec, payload)
    view = _Recorder()
    outcome = follow_run(client, spec["run_id"], view, name=accepted["name"])
    assert outcome.state == "FINISHED"
    reports = [e for e in view.events if e.get("kind") == "report"]
    assert [e["rank"] for e in reports] == [0, 0, 0]
    assert [e["metrics"]["epoch"] for e in reports] == [0, 1, 2]
    progress = [e for e in view.events if e.get("kind") == "progress"]
    assert progress, view.events
    last = {}
    for e in progress:
        last.update(e["ranks"])
    # Before the run's end state, every other rank's last report was counted.
    assert last == {str(r): {"reports": 3, "epoch": 2} for r in (1, 2, 3)}, last
    end = next(i for i, e in enumerate(view.events) if e.get("kind") == "state" and e["state"] == "FINISHED")
    assert max(i for i, e in enumerate(view.events) if e.get("kind") == "progress") < end
    # The progress model shows every rank's bar from the counters.
    from raynb.notebook.run_pane.model import RunProgress

    p = RunProgress("r", world_size=4, total_epochs=3)
    for e in view.events:
        p.on_event(e)
    assert p.rank_progress == {r: (3, 3) for r in range(4)}


def _burst_then_read_own_files(config):
    """Rank 0 makes a burst of reports, waits past the head's flush timer, and reads the
    run's files from inside the run."""
    import time as _time

    from raynb.train import get_context, report

    for i in range(config["burst"]):
        report({"i": i})
    if get_context().get_world_rank() != 0:
        return None
    _time.sleep(0.6)
    path = get_context().get_storage_path()
    with open(f"{path}/result.json") as f:
        seen = len(f.read().splitlines())
    for i in range(config["more"]):
        report({"i": config["burst"] + i})
    return seen


def test_batched_run_files_are_written_on_a_timer_and_complete_when_the_run_ends(warm, tmp_path):
    from raynb.train.fit_run import execute_run

    result, seen_mid_run = execute_run(
        _burst_then_read_own_files,
        {"burst": 300, "more": 700},
        ScalingConfig(num_workers=2),
        RunConfig(verbose=0, storage_path=str(tmp_path)),
    )
    assert seen_mid_run == 300  # flushed by the head's tick while the run went on
    path = Path(result.path)
    rows = [json.loads(line) for line in (path / "result.json").read_text().splitlines()]
    assert [r["i"] for r in rows] == list(range(1000))  # all of them, in order, at the run's end
    assert [r["training_iteration"] for r in rows] == list(range(1, 1001))
    csv_lines = (path / "progress.csv").read_text().splitlines()
    assert len(csv_lines) == 1001 and csv_lines[0].startswith("i,training_iteration")
    assert len(result.metrics_dataframe) == 1000 and result.metrics["i"] == 999


def _big_payload(config):
    arr = config["arr"]
    return float(arr[:: 1 << 20].sum())


def _rss(pids) -> dict:
    return {pid: psutil.Process(pid).memory_info().rss for pid in pids}


def test_worker_rss_returns_to_idle_after_a_run_that_shipped_256_mib(warm):
    from raynb.train.fit_run import execute_run

    st = warm.status()
    pids = [w["pid"] for w in st["workers"] if w["state"] == "idle"]
    # One small run first, so the workers' idle state includes what any run leaves (caches).
    execute_run(_big_payload, {"arr": np.ones(1 << 20, dtype=np.uint8)}, ScalingConfig(num_workers=4), QUIET)
    idle = _rss(pids)
    arr = np.ones(256 << 20, dtype=np.uint8)
    _, value = execute_run(_big_payload, {"arr": arr}, ScalingConfig(num_workers=4), QUIET)
    assert value == 256.0
    del arr
    deadline = time.monotonic() + 10
    while True:
        grown = {pid: (rss - idle[pid]) / 2**20 for pid, rss in _rss(pids).items()}
        if max(grown.values()) < 10 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert max(grown.values()) < 10, f"MiB above idle per worker pid after the run: {grown}"
    assert raynb.cluster_status()["workers"]  # the cluster is fine


def _ready_spares(pool, deadline_s: float = 10.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not pool._ready and time.monotonic() < deadline:
        pool._read_ready()
        time.sleep(0.01)
    assert pool._ready, "the spare-directory maker made no batch"


def test_spare_run_directories_are_private_made_by_an_idle_process_and_renamed_into_place(tmp_path):
    import os
    import signal
    import stat

    import psutil

    from raynb.cluster.storage.made_ahead.spare_files import SparePool

    root = tmp_path / "spare"
    pool = SparePool(root, dirs=2, ahead=1).start()
    maker = psutil.Process(pool._proc.pid)
    try:
        _ready_spares(pool)
        assert os.sched_getscheduler(maker.pid) == os.SCHED_IDLE  # (set before its first batch)
        assert stat.S_IMODE(os.stat(root).st_mode) == stat.S_IMODE(os.stat(pool.dir).st_mode) == 0o700
        runs = tmp_path / "runs"
        runs.mkdir()
        assert pool.take(runs / "r0")
        assert stat.S_IMODE(os.stat(runs / "r0").st_mode) == 0o700 and not os.listdir(runs / "r0")
        assert not pool.take(runs / "r0")  # never over an existing directory
        assert pool.take(runs / "r1")  # the batch's last: the maker makes the next one at once
        deadline = time.monotonic() + 10
        while not pool.take(runs / "r2") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (runs / "r2").is_dir(), "no new batch after one was used up"
        assert pool.taken == 3
        os.kill(maker.pid, signal.SIGKILL)  # the maker gone: what is ready is used, then none
        maker.wait(10)
        while pool.take(runs / f"r{pool.taken}"):
            pass
        assert not pool.take(runs / "last") and pool.missed >= 1
        # a spare that vanished (removed by hand) is skipped, not tried again forever
        pool._ready.append([pool.dir / "gone", [1, 0]])
        assert not pool.take(runs / "x") and pool.take(runs / "y") is False and not pool._ready
    finally:
        pool.stop()
    assert not root.exists() and not maker.is_running()


def _inode_flags(path) -> int | None:
    import array
    import fcntl
    import os

    from raynb.cluster.storage.made_ahead import spare_files

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = array.array("i", [0])
        fcntl.ioctl(fd, spare_files._FS_IOC_GETFLAGS, flags, True)
        return flags[0]
    except OSError:
        return None  # no inode flags on this file system (tmpfs)
    finally:
        os.close(fd)


def test_spare_directories_are_spread_over_block_groups_where_the_file_system_can(tmp_path):
    """ext2/3/4: the spare root is flagged a top of hierarchies (``chattr +T``), so Orlov
    spreads the maker's batches; elsewhere nothing is flagged and nothing fails."""
    from raynb.cluster.storage.made_ahead import spare_files
    from raynb.cluster.storage.made_ahead.spare_files import SparePool

    pool = SparePool(tmp_path / "spare", dirs=2, ahead=1).start()
    try:
        flags = _inode_flags(pool.dir)
        if flags is not None:
            assert flags & spare_files._FS_TOPDIR_FL, hex(flags)
            out = subprocess.run(["lsattr", "-d", str(pool.dir)], capture_output=True, text=True)
            if out.returncode == 0:  # e2fsprogs' own reading of the flag
                assert "T" in out.stdout.split()[0], out.stdout
        _ready_spares(pool)
        assert pool.take(tmp_path / "run")
    finally:
        pool.stop()


def test_the_spare_maker_cleans_up_and_exits_when_its_head_is_killed(tmp_path):
    import os
    import signal

    import psutil

    root = tmp_path / "spare"
    code = (
        "import sys, time\nfrom raynb.cluster.storage.made_ahead.spare_files import SparePool\n"
        f"p = SparePool({str(root)!r}).start()\nprint(p._proc.pid, p.dir, flush=True)\ntime.sleep(60)\n"
    )
    head = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pid, own = head.stdout.readline().split()
        maker, own = psutil.Process(int(pid)), Path(own)
        deadline = time.monotonic() + 10
        while not any(own.glob("*")) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert any(own.glob("*")), "the maker made no batch"
        os.kill(head.pid, signal.SIGKILL)
        head.wait(10)
        maker.wait(10)  # its input ended with the head: it removed its directory and exited
        assert not own.exists() and list(root.iterdir()) == []
        # the next head's pool removes what a killed one's maker could not, and only that
        (root / "1-dead").mkdir()
        from raynb.cluster.storage.made_ahead.spare_files import SparePool

        pool = SparePool(root).start()
        try:
            assert [p.name for p in root.iterdir()] == [pool.dir.name]
        finally:
            pool.stop()
        assert not root.exists()
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()


def _same_every_time(config):
    from raynb.train import report

    report({"x": config["x"]})


def test_an_unchanged_rerun_links_its_function_and_params_and_an_edited_file_is_not_reused(warm, tmp_path):
    import os
    import pickle
    import stat

    from raynb.train.fit_run import execute_run

    runs = RunConfig(verbose=0, storage_path=str(tmp_path))
    first, _ = execute_run(_same_every_time, {"x": 1}, ScalingConfig(num_workers=2), runs)
    second, _ = execute_run(_same_every_time, {"x": 1}, ScalingConfig(num_workers=2), runs)
    a, b = Path(first.path), Path(second.path)
    for name in ("function.pkl", "params.json"):
        sa, sb = os.stat(a / name), os.stat(b / name)
        assert (sa.st_ino, sa.st_nlink) == (sb.st_ino, 2), name  # one inode, two names
        assert stat.S_IMODE(sb.st_mode) == 0o600
    assert json.loads((b / "params.json").read_text()) == {"x": 1}
    assert pickle.loads((b / "function.pkl").read_bytes())  # what restore re-runs
    # A changed config is a file of its own; so is one whose earlier copy a user edited.
    third, _ = execute_run(_same_every_time, {"x": 2}, ScalingConfig(num_workers=2), runs)
    assert os.stat(Path(third.path) / "params.json").st_ino != os.stat(b / "params.json").st_ino
    (b / "params.json").write_text('{"x": "edited"}')
    fourth, _ = execute_run(_same_every_time, {"x": 1}, ScalingConfig(num_workers=2), runs)
    assert json.loads((Path(fourth.path) / "params.json").read_text()) == {"x": 1}
    assert json.loads((a / "params.json").read_text()) == {"x": "edited"}  # a and b share it
    # Removing a run's directory leaves the runs linked to it whole.
    import shutil

    shutil.rmtree(a)
    assert pickle.loads((b / "function.pkl").read_bytes()) and second.metrics["x"] == 1


def test_a_new_run_has_all_its_files_when_fit_returns_and_no_temporary_left(warm, tmp_path):
    from raynb.cluster.storage.rundir import read_run_dir
    from raynb.train.fit_run import execute_run

    def quiet():
        return 7

    storage = RunConfig(verbose=0, storage_path=str(tmp_path))
    for _ in range(2):  # the second one's function.pkl and params.json are links
        result, value = execute_run(quiet, None, ScalingConfig(num_workers=1), storage)
        assert value == 7
        path = Path(result.path)
        assert sorted(p.name for p in path.iterdir()) == ["function.pkl", "params.json", "run.json"]
        rec = read_run_dir(path)
        assert rec["state"] == "FINISHED" and rec["params"] == {} and rec["reports"] == []
    result, _ = execute_run(_same_every_time, {"x": 3}, ScalingConfig(num_workers=2), storage)
    path = Path(result.path)
    assert sorted(p.name for p in path.iterdir()) == [
        "function.pkl",
        "params.json",
        "progress.csv",
        "result.json",
        "run.json",
    ]
    assert (path / "progress.csv").read_text().splitlines()[0].startswith("x,training_iteration")
    assert json.loads((path / "result.json").read_text())["x"] == 3


def _print_then_report(config):
    from raynb.train import get_context, report

    print(f"rank {get_context().get_world_rank()} starts")
    report({"step": 1})
    report({"step": 2})


def _run_recording_messages(monkeypatch, client):
    """Submit and follow a 2-rank run; returns (messages as received, events as followed)."""
    received = []
    accept = client.session.accept

    def recording(frames, identity=None):
        msg = accept(frames, identity)
        if msg is not None:
            received.append((msg.msg_type, dict(msg.content)))
        return msg

    monkeypatch.setattr(client.session, "accept", recording)
    spec, payload = build_submission(_print_then_report, {}, ScalingConfig(num_workers=2), QUIET)
    submit_run_accepted(client, spec, payload)
    view = _Recorder()
    outcome = follow_run(client, spec["run_id"], view, all_ranks=True)
    monkeypatch.undo()
    assert outcome.state == "FINISHED" and [r["step"] for r in outcome.reports] == [1, 2]
    run_id = spec["run_id"]  # (an earlier test's run may still send this client a late event)
    ours = [
        (t, c)
        for t, c in received
        if c.get("run_id") == run_id
        or t == "pong"
        or (t == "run_events" and all(e["run_id"] == run_id for e in c["events"]))
    ]
    return ours, view.events


def test_a_runs_client_messages_are_batched_per_drain_in_order(warm, monkeypatch):
    """The head sends what it has for a client once per drain of its socket
    (head/client_outbox.py): the submit's states inside the accepted (2.3), the end's
    events inside run_done; the client reads them back in order."""
    received, events = _run_recording_messages(monkeypatch, get_client())
    types = [t for t, _ in received if t != "pong"]
    assert types[0] == "run_accepted", types
    assert [e["event"]["state"] for e in received[0][1]["events"]] == ["PENDING", "RUNNING"]
    assert types[-1] == "run_done" and received[-1][1]["events"][-1]["event"]["state"] == "FINISHED"
    states = [e["state"] for e in events if e.get("kind") == "state"]
    assert states == ["PENDING", "RUNNING", "FINISHED"], events
    carried = [
        len(c.get("events", ())) if t in ("run_events", "run_done") else 1
        for t, c in received
        if t in ("run_event", "run_events", "run_done")
    ]
    assert len(carried) < sum(carried), (types, carried)
    outputs = [
        e["event"]["text"]
        for t, c in received
        if t in ("run_events", "run_done")
        for e in c.get("events", ())
        if e["event"]["kind"] == "output"
    ]
    outputs += [
        c["event"]["text"] for t, c in received if t == "run_event" and c["event"]["kind"] == "output"
    ]
    assert sorted("".join(outputs).split("\n")[:-1]) == ["rank 0 starts", "rank 1 starts"], outputs


def test_a_22_client_gets_the_first_states_after_the_accepted(warm, monkeypatch):
    """A 2.2 client (run_events, but no events inside run_accepted) gets the submit's
    states in a run_events message after the accepted, as before 2.3."""
    from raynb.cluster.protocol import messages
    from raynb.cluster.protocol.control import Client

    info = get_client().info
    monkeypatch.setattr(messages, "PROTOCOL_VERSION", "2.2")
    old = Client(info["address"], info["key"].encode(), info)
    try:
        received, events = _run_recording_messages(monkeypatch, old)
    finally:
        old.close()
    types = [t for t, _ in received if t != "pong"]
    assert types[:2] == ["run_accepted", "run_events"] and "events" not in received[0][1], types
    assert [e["event"]["state"] for e in received[1][1]["events"]] == ["PENDING", "RUNNING"]
    assert [e["state"] for e in events if e.get("kind") == "state"] == ["PENDING", "RUNNING", "FINISHED"]


def test_a_client_of_the_older_protocol_gets_each_message_alone(warm, monkeypatch):
    """A 2.1 client (no run_events) is sent each event as its own run_event, as before."""
    from raynb.cluster.protocol import messages
    from raynb.cluster.protocol.control import Client

    info = get_client().info
    monkeypatch.setattr(messages, "PROTOCOL_VERSION", "2.1")  # what this client's messages say
    old = Client(info["address"], info["key"].encode(), info)
    try:
        received, events = _run_recording_messages(monkeypatch, old)
    finally:
        old.close()
    types = [t for t, _ in received]
    assert "run_events" not in types and "events" not in received[-1][1], types
    assert types.count("run_event") == len(events)
    assert [e["state"] for e in events if e.get("kind") == "state"] == ["PENDING", "RUNNING", "FINISHED"]


def test_a_tasks_last_events_ride_in_its_task_done_to_a_head_that_reads_them():
    """A worker's link sends the events queued just before a task_done inside it
    (one message for a short function's report and end), only to a 2.2 head; an older
    head gets them as before. Order and content are the same either way."""
    import collections

    from raynb.cluster.protocol import event_batch, messages
    from raynb.cluster.worker.head_link import HeadLink

    class Dealer:  # where the I/O thread's frames go: kept, then verified as the head does
        def __init__(self):
            self.sent = []

        def send_multipart(self, frames, copy=False):
            self.sent.append(frames)

    key = b"k" * 64
    link = HeadLink.__new__(HeadLink)  # its sending loop only: no sockets, no threads
    head = messages.Session(key, validate=True)
    for version, expected in (("2.2", ["task_done"]), ("2.1", ["task_events", "task_done"])):
        link.head_batches = event_batch.reads_batches(version)
        link._sent = link._waiters = 0
        link._woken, link._outbox = (
            True,
            collections.deque(
                [
                    (
                        messages.TASK_EVENT,
                        {"run_id": "r", "rank": 1, "event": {"kind": "report", "metrics": {"i": i}}},
                        (),
                    )
                    for i in range(2)
                ]
                + [(messages.TASK_DONE, {"run_id": "r", "rank": 1, "status": "ok", "error": None}, [b"ret"])]
            ),
        )
        dealer = Dealer()
        link.send_queued(messages.Session(key), dealer)
        msgs = [head.deserialize(frames) for frames in dealer.sent]
        assert [m.msg_type for m in msgs] == expected
        events = [e for m in msgs for e in event_batch.unbatch(m)]
        assert [e.content["event"]["metrics"]["i"] for e in events] == [0, 1]
        assert msgs[-1].content["status"] == "ok" and bytes(msgs[-1].buffers[0]) == b"ret"


def _report_then_wait(config):
    import time as _time

    from raynb.train import report

    report({"step": 0, "t": _time.time()})
    _time.sleep(config["wait"])
    report({"step": 1, "t": _time.time()})


def test_a_long_tasks_reports_reach_the_client_while_it_runs_and_a_short_ones_ride_its_end(warm):
    """worker_link: a task that runs past HANDOVER_S lends the link to the I/O thread,
    which sends what was reported so far at once; the client sees report 0 long before
    the function ends. A short task's report and end travel together, still in order."""
    from raynb.cluster.worker import head_link as worker_link

    client = get_client()
    spec, payload = build_submission(_report_then_wait, {"wait": 1.0}, ScalingConfig(num_workers=2), QUIET)
    accepted = submit_run_accepted(client, spec, payload)
    seen: dict = {}

    class Timed(_Recorder):
        def handle(self, event):
            super().handle(event)
            if event.get("kind") == "report":
                seen.setdefault(event["metrics"]["step"], time.time())

    view = Timed()
    outcome = follow_run(client, spec["run_id"], view, name=accepted["name"])
    assert outcome.state == "FINISHED"
    reports = [e["metrics"] for e in view.events if e.get("kind") == "report"]
    assert [r["step"] for r in reports] == [0, 1]
    # Report 0 arrived within HANDOVER_S (+ slack for a loaded machine) of being made,
    # not with the run's end a second later.
    delay = seen[0] - reports[0]["t"]
    assert delay < worker_link.HANDOVER_S + 0.5 < 1.0, delay
    # A short function: its report is in the Result and the events kept their order.
    from raynb.train.fit_run import execute_run

    result, _ = execute_run(_report_then_wait, {"wait": 0.0}, ScalingConfig(num_workers=2), QUIET)
    assert result.metrics["step"] == 1 and len(result.metrics_dataframe) == 2


def test_the_wake_timer_fires_once_after_its_delay_and_never_when_disarmed_first():
    import select

    from raynb.cluster.worker.wake_timer import WakeTimer

    timer = WakeTimer()
    try:
        assert select.select([timer], [], [], 0)[0] == []
        t0 = time.monotonic()
        timer.arm(0.05)
        if timer.deferred:
            assert select.select([timer], [], [], 0.01)[0] == []  # not before its time
        assert select.select([timer], [], [], 2.0)[0] == [timer]
        assert time.monotonic() - t0 >= (0.045 if timer.deferred else 0.0)
        assert timer.clear() is True and timer.clear() is False  # consumed once
        timer.arm(0.05)
        timer.disarm()
        assert select.select([timer], [], [], 0.15)[0] == []  # cancelled: never fires
        assert timer.clear() is False
        timer.arm(0.01)
        time.sleep(0.05)
        timer.disarm()  # fired, then disarmed
        assert select.select([timer], [], [], 0)[0] == [] or timer.clear() is False
    finally:
        timer.close()


def test_the_compiled_schema_checks_agree_with_the_described_problems():
    """schema.valid_for is the fast path of every received message: it must accept and
    refuse exactly what problem() names, for every message type's record."""
    import copy
    import random

    from raynb.cluster.protocol import messages, schema

    odd = [None, True, 0, -1, 3, 2.5, "x", "", [], [1], ["a"], {}, {"k": 1}, {1: 2}, b"b", 1 << 70]
    rng = random.Random(15)

    def sample(spec, depth=0):
        """A value that fits spec (mostly), to mutate."""
        if isinstance(spec, tuple):
            return sample(rng.choice([s for s in spec if s is not None] or [None]), depth)
        if isinstance(spec, schema.Record):
            return {
                k: sample(s, depth + 1) for k, (s, req) in spec.fields.items() if req or rng.random() < 0.5
            }
        if isinstance(spec, schema.ListOf):
            return [sample(spec.item, depth + 1) for _ in range(rng.randint(0, 2))]
        if isinstance(spec, schema.MapOf):
            return {"a": sample(spec.value, depth + 1)}
        if isinstance(spec, schema.Int):
            return spec.low if spec.low is not None else (spec.high if spec.high is not None else 5)
        return {float: 1.5, int: 2, str: "s", bool: False, dict: {}, list: []}.get(spec, None)

    def mutate(value):
        if isinstance(value, dict) and value and rng.random() < 0.7:
            k = rng.choice(list(value))
            if rng.random() < 0.3:
                del value[k]
            else:
                value[k] = mutate(value[k]) if rng.random() < 0.5 else rng.choice(odd)
            return value
        return rng.choice(odd)

    checked = refused = 0
    for msg_type, record in messages.SCHEMAS.items():
        ok = schema.valid_for(record)
        for _ in range(60):
            value = sample(record)
            if rng.random() < 0.7:
                value = mutate(copy.deepcopy(value))
            described = record.describe_problem(value)
            assert ok(value) == (described is None), (msg_type, value, described)
            assert record.problem(value) == described
            checked += 1
            refused += described is not None
    assert checked > 1000 and 0.2 * checked < refused < 0.9 * checked


def test_a_private_file_is_rewritten_whole_without_truncating_first(tmp_path):
    import os

    from raynb.cluster.storage.private_files import rewrite, write_json_atomic

    target = tmp_path / "state.json"
    (tmp_path / ".state.json.tmp").write_text("x" * 5000)  # a longer leftover of a crash
    write_json_atomic(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1}
    assert not (tmp_path / ".state.json.tmp").exists()
    assert os.stat(target).st_mode & 0o777 == 0o600
    rewrite(target, b"12345678")
    rewrite(target, b"abc")
    assert target.read_bytes() == b"abc"


def test_params_json_cannot_hold_refuse_the_run_and_the_head_runs_on(warm, tmp_path):
    """A raw client's params that JSON cannot hold (a cycle) get an error at the submit, and
    the head goes on (its files written after the tasks are sent never see such a run)."""
    import pytest

    from raynb.train.fit_run import execute_run

    spec, payload = build_submission(
        _report_then_wait,
        {"wait": 0.0},
        ScalingConfig(num_workers=1),
        RunConfig(verbose=0, storage_path=str(tmp_path)),
    )
    cyclic: dict = {}
    cyclic["self"] = cyclic
    spec["params"] = cyclic
    with pytest.raises(ValueError, match="failed to handle submit_run"):
        submit_run_accepted(get_client(), spec, payload)
    result, _ = execute_run(
        _report_then_wait,
        {"wait": 0.0},
        ScalingConfig(num_workers=1),
        RunConfig(verbose=0, storage_path=str(tmp_path)),
    )
    assert result.metrics["step"] == 1
    assert json.loads((Path(result.path) / "params.json").read_text()) == {"wait": 0.0}


def test_wire_sends_and_receives_a_message_as_pyzmqs_multipart_calls_do():
    """``wire.send_frames`` / ``recv_frames`` over a real socket pair: the same frames in
    the same order (a big one sent zero-copy), ``zmq.Again`` when nothing waits, and a
    stand-in with pyzmq's methods gets its own calls."""
    import zmq

    from raynb.cluster.protocol.framing import recv_frames, send_frames

    ctx = zmq.Context()
    a, b = ctx.socket(zmq.DEALER), ctx.socket(zmq.ROUTER)
    try:
        port = b.bind_to_random_port("tcp://127.0.0.1")
        a.connect(f"tcp://127.0.0.1:{port}")
        big = np.arange(1 << 17, dtype=np.uint8)  # over copy_threshold: sent from its buffer
        msgs = [[b"sig", memoryview(b"header"), big.data], [b"one"], [b"", b"x" * 100, bytearray(b"y")]]
        for frames in msgs:
            send_frames(a, frames)
        for frames in msgs:
            got = recv_frames(b)  # a ROUTER: the sender's identity first
            assert all(isinstance(f, zmq.Frame) for f in got)
            assert [bytes(f.buffer) for f in got[1:]] == [bytes(f) for f in frames]
        with pytest.raises(zmq.Again):
            recv_frames(b, zmq.NOBLOCK)
        assert b.poll(0) == 0  # nothing half-read left behind

        class Recorder:
            def __init__(self):
                self.calls = []

            def send_multipart(self, frames, copy=True, **kw):
                self.calls.append((frames, copy, kw))

            def recv_multipart(self, copy=True, **kw):
                self.calls.append(("recv", copy, kw))
                return [b"r"]

        r = Recorder()
        send_frames(r, [b"a"])
        send_frames(r, [b"b"], zmq.NOBLOCK)
        assert recv_frames(r) == [b"r"]
        assert r.calls == [([b"a"], False, {}), ([b"b"], False, {"flags": zmq.NOBLOCK}), ("recv", False, {})]
    finally:
        a.close(0)
        b.close(0)
        ctx.term()


def test_an_idle_head_sleeps_between_ticks_after_a_burst_of_runs(warm):
    """The head ticks at most every ``TICK_MIN_S`` while messages come back to back, and
    waits for the tick it put off; once idle it wakes about every ``TICK_S`` again, not
    every few milliseconds (a put-off tick once made its poll spin)."""
    from raynb.cluster.head.server import TICK_S
    from raynb.cluster.head.tick_pacer import TICK_MIN_S
    from raynb.train.torch import TorchTrainer

    head = psutil.Process(warm.info["pids"]["head"])

    def trivial():
        pass

    for _ in range(5):
        TorchTrainer(trivial, scaling_config=ScalingConfig(num_workers=4), run_config=QUIET).fit()
    time.sleep(TICK_S)
    before = _voluntary_switches(head.pid)
    t0 = time.monotonic()
    time.sleep(1.0)
    woke = _voluntary_switches(head.pid) - before
    per_s = woke / (time.monotonic() - t0)
    # Idle: one wake-up per tick (1/TICK_S a second) plus heartbeats from 4 workers and
    # the node agent (every HEARTBEAT_S); a spinning poll would wake ~1/TICK_MIN_S a second.
    assert per_s < 0.5 / TICK_MIN_S, f"the idle head woke {per_s:.0f} times a second"


def test_the_head_waits_for_a_put_off_tick_without_spinning():
    """A tick put off by less than a millisecond still waits a whole one: pyzmq takes the
    timeout as int milliseconds, and a 0 ms poll returns at once. Idle, the poll waits the
    whole TICK_S."""
    from raynb.cluster.head.tick_pacer import TICK_MIN_S, TickPacer

    p = TickPacer(0.1)
    assert p.poll_ms(0.0) == 100 and p.due(10.0)  # idle: tick, the next TICK_MIN_S away
    assert p.poll_ms(10.0) == 100  # nothing owed: wait the whole TICK_S
    assert not p.due(10.0 + TICK_MIN_S - 0.0004)  # a drain just before it: owed
    assert p.poll_ms(10.0 + TICK_MIN_S - 0.0004) == 1
    assert p.poll_ms(10.0 + TICK_MIN_S - 0.004) == 4
    assert p.poll_ms(10.0 + TICK_MIN_S + 1.0) == 0  # due already: tick now
    assert p.due(10.0 + TICK_MIN_S) and p.poll_ms(10.0 + TICK_MIN_S) == 100


def _voluntary_switches(pid: int) -> int:
    with open(f"/proc/{pid}/task/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))


def test_sys_path_dirs_stats_an_entry_until_it_is_a_directory_and_keeps_one_found(tmp_path, monkeypatch):
    from raynb.client import shipping

    later, gone = tmp_path / "later", tmp_path / "gone"
    gone.mkdir()
    monkeypatch.setattr(shipping, "_DIRS_SEEN", set())
    monkeypatch.setattr(sys, "path", ["", str(later), str(gone), str(tmp_path / "never")])
    assert shipping.sys_path_dirs() == [str(gone)]
    later.mkdir()
    gone.rmdir()  # seen once: still sent (the worker stats each entry before adding it)
    assert shipping.sys_path_dirs() == [str(later), str(gone)]


def test_the_connection_files_name_is_its_path_without_touching_raynb_home(tmp_path, monkeypatch):
    from raynb.cluster.connection_file import connection_file_name, connection_file_path

    home = tmp_path / "home"
    monkeypatch.setenv("RAYNB_HOME", str(home))
    assert connection_file_name() == str(home / "cluster.json") and not home.exists()
    assert connection_file_name() == str(connection_file_path()) and home.is_dir()
    monkeypatch.delenv("RAYNB_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert connection_file_name() == str(tmp_path / ".raynb" / "cluster.json")


def test_notebook_sources_are_the_cells_in_linecache_found_without_a_stat(tmp_path, monkeypatch):
    """A fit sends the notebook's cells (linecache entries with no mtime, as IPython makes
    them) for remote tracebacks; files linecache read are told apart without a stat each."""
    import linecache

    from raynb.client import shipping

    cell = "<ipython-input-7-0123abcd>"
    module = tmp_path / "mod.py"
    module.write_text("y = 2\n")
    linecache.cache[cell] = (6, None, ["x = 1\n"], cell)
    assert linecache.getlines(str(module)) == ["y = 2\n"]  # a file's entry: its mtime is set
    try:

        def no_stat(*a, **k):
            raise AssertionError("notebook_sources stat-ed a file")

        monkeypatch.setattr(shipping.os, "stat", no_stat)
        monkeypatch.setattr(shipping.os.path, "exists", no_stat)
        got = shipping.notebook_sources()
        monkeypatch.undo()
        assert got.get(cell) == ["x = 1\n"] and str(module) not in got
    finally:
        linecache.cache.pop(cell, None)
        linecache.cache.pop(str(module), None)


def _defined_in_a_cell(source: str, filename: str, name: str, mtime=None):
    """A function compiled as IPython compiles a cell (its lines in linecache, no mtime;
    IPython before 8.6 gave cells one)."""
    import linecache

    linecache.cache[filename] = (len(source), mtime, source.splitlines(True), filename)
    scope = {"__name__": "__main__"}
    exec(compile(source, filename, "exec"), scope)
    return scope[name]


def test_a_payload_carries_the_cells_of_its_code_only():
    """The notebook's other cells (every version of every cell run, in linecache) no longer
    travel with each fit: only those whose code the payload ships, a helper's cell too."""
    import linecache
    import pickle

    from raynb.client.shipping import dumps_payload, notebook_sources

    names = [f"<ipython-input-{i}-feed>" for i in range(300)]
    try:
        older = _defined_in_a_cell("def older(x):\n    return x\n", names[2], "older", mtime=1e9)
        helper = _defined_in_a_cell("def helper(x):\n    return older(x) + 1\n", names[0], "helper")
        helper.__globals__["older"] = older
        for f in names[3:]:  # the rest of a long session
            linecache.cache[f] = (20, None, ["unrelated = 'x' * 1000\n"] * 30, f)
        src = "def train(config):\n    return helper(config['x'])\n"
        linecache.cache[names[1]] = (len(src), None, src.splitlines(True), names[1])
        scope = {"__name__": "__main__", "helper": helper}
        exec(compile(src, names[1], "exec"), scope)
        payload = pickle.loads(dumps_payload(scope["train"], {"x": 1}, notebook_sources()))
        assert payload["sources"] == {
            names[0]: "def helper(x):\n    return older(x) + 1\n",
            names[1]: src,
            names[2]: "def older(x):\n    return x\n",
        }
        assert payload["fn"](payload["config"]) == 2
        assert payload["fn"].__code__.co_filename == names[1]
    finally:
        for f in names:
            linecache.cache.pop(f, None)


class _PrepareStub:
    """What Worker._prepare reads of a worker, without its sockets and process group."""

    _sys_path_seen, _env_left, worker_id = (), None, "w"

    def __init__(self):
        import os
        import types

        # The umask _prepare sets: this process's own, so the test leaves it as it was (a
        # worker's 077 here made every later test's files private to root).
        self._umask = os.umask(0o077)
        os.umask(self._umask)

        self._modules = types.SimpleNamespace(reload_changed=lambda: None)
        self.threads = types.SimpleNamespace(start=lambda *a: None)
        self.rendezvous = types.SimpleNamespace(ensure=lambda *a: None)
        self.task_env = types.SimpleNamespace(set=lambda env: None, restore=lambda: None)
        self.library_state = types.SimpleNamespace(note=lambda: None, restore=lambda status: None)


def _rank_task(rank: int, cwd=None) -> dict:
    return {
        "run_id": "r",
        "rank": rank,
        "world_size": 2,
        "local_rank": rank,
        "local_world_size": 2,
        "node_rank": 0,
        "group": {"master_addr": "127.0.0.1", "master_port": 29500},
        "cwd": cwd,
    }


def test_a_tasks_rank_variables_are_set_whatever_the_last_task_left(monkeypatch, tmp_path):
    """A worker compares the rank variables with what its last task left (read after that
    task's end); a task that never reached its end (an interrupt escaped it) leaves nothing
    to compare with, so the next sets them all."""
    import os

    from raynb.cluster.worker.task_loop import RANK_ENV, Worker

    for name in RANK_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    w = _PrepareStub()
    Worker._prepare(w, _rank_task(0))
    w._env_left = tuple(map(os.environ.get, RANK_ENV))  # task A's end (Worker.execute)
    Worker._prepare(w, _rank_task(1))  # task B: its end never reached
    Worker._prepare(w, _rank_task(0))  # task C, rank 0 again
    assert (os.environ["RANK"], os.environ["LOCAL_RANK"]) == ("0", "0")
    os.environ["RANK"] = "7"  # the task's own code changed it: read at its end, set again
    w._env_left = tuple(map(os.environ.get, RANK_ENV))
    Worker._prepare(w, _rank_task(0))
    assert os.environ["RANK"] == "0"


def test_a_task_starts_where_the_last_ones_directory_was_removed(monkeypatch, tmp_path):
    import os

    from raynb.cluster.worker.task_loop import RANK_ENV, Worker

    for name in RANK_ENV:
        monkeypatch.delenv(name, raising=False)
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()  # the directory the last task left the worker in
    Worker._prepare(_PrepareStub(), _rank_task(0, cwd=str(tmp_path / "not-on-this-node")))
    Worker._prepare(_PrepareStub(), _rank_task(0, cwd=str(tmp_path)))
    assert os.getcwd() == str(tmp_path)


def test_a_run_accepted_carries_its_own_first_states_only():
    """The states after a run_accepted ride in it (2.3); another run's events, and a big
    event, go in run_events after it, in order."""
    from raynb.cluster.head.client_outbox import ClientOutbox
    from raynb.cluster.protocol import messages
    from raynb.cluster.protocol.event_batch import MAX_BATCH_BYTES

    sent = []
    outbox = ClientOutbox(lambda ident, t, c, b: sent.append((t, c)))
    outbox.heard(b"c", "2.3")
    state = lambda run, s: (messages.RUN_EVENT, {"run_id": run, "event": {"kind": "state", "state": s}})  # noqa: E731
    big = (
        messages.RUN_EVENT,
        {"run_id": "A", "event": {"kind": "output", "rank": 0, "text": "x" * (200 << 10)}},
    )
    items = [
        (messages.RUN_ACCEPTED, {"run_id": "B", "name": "b", "path": "/p"}),
        state("B", "PENDING"),
        state("B", "RUNNING"),
        *[big] * 16,
        state("B", "late"),
    ]
    for t, c in items:
        outbox.put(b"c", t, c)
    outbox.flush()
    assert sent[0][0] == messages.RUN_ACCEPTED
    assert [e["event"]["state"] for e in sent[0][1]["events"]] == ["PENDING", "RUNNING"]
    rest = [e for t, c in sent[1:] for e in (c["events"] if t == messages.RUN_EVENTS else [c])]
    assert [e["event"].get("state", "output") for e in rest] == ["output"] * 16 + ["late"]
    assert all(t in (messages.RUN_EVENTS, messages.RUN_EVENT) for t, _ in sent[1:])
    assert (
        max(
            sum(len(e["event"].get("text", "")) for e in c["events"])
            for t, c in sent[1:]
            if t == messages.RUN_EVENTS
        )
        <= MAX_BATCH_BYTES
    )
