"""The stop button in a notebook: what it stops and what the cell shows.

- During a ``%%ray_tune`` cell or a plain ``Tuner.fit()`` cell, the cell fails as an
  interrupted cell does, so *Run All* stops there (the next queued cell is aborted), and
  the results so far stay reachable (``_ray_tune_result`` / ``--result``,
  ``tuner.get_results()``).
- A ``%%ray_train`` interrupt shows the one line ``KeyboardInterrupt: run '...' cancelled
  on every rank``, not the magic's call with the whole cell as one string.
- After an interrupt, a trial whose run never started (it waited for workers) is PENDING,
  not PAUSED.

The kernel tests run a real ipykernel (jupyter_client) on the session cluster and read
the shell replies and iopub messages a front-end gets.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cloudpickle
import pytest
from test_what_users_see import RAYNB_ROOT, Kernel, error_of, streams

cloudpickle.register_pickle_by_value(sys.modules[__name__])
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def kernel(cluster, tmp_path_factory):
    k = Kernel(tmp_path_factory.mktemp("kernel"))
    try:
        assert error_of(k.run("%load_ext raynb")) is None
        yield k
    finally:
        k.close()


def run_all(kernel, cells: list[str], interrupt_when, timeout: float = 120.0) -> dict:
    """Send ``cells`` at once, as *Run All* does; interrupt the kernel once
    ``interrupt_when()`` is true. Returns {msg_id: {"reply": content, "msgs": [iopub]}}."""
    ids = [kernel.kc.execute(c) for c in cells]
    out = {i: {"reply": None, "msgs": []} for i in ids}
    deadline = time.monotonic() + timeout
    sent = False
    while any(v["reply"] is None for v in out.values()) or not _idle(out[ids[0]]["msgs"]):
        assert time.monotonic() < deadline, out
        if not sent and interrupt_when():
            kernel.km.interrupt_kernel()
            sent = True
        try:
            m = kernel.kc.get_iopub_msg(timeout=0.1)
            if m["parent_header"].get("msg_id") in out:
                out[m["parent_header"]["msg_id"]]["msgs"].append(m)
        except Exception:  # noqa: BLE001 - queue.Empty: nothing on iopub yet
            pass
        try:
            r = kernel.kc.get_shell_msg(timeout=0.01)
            if r["parent_header"].get("msg_id") in out:
                out[r["parent_header"]["msg_id"]]["reply"] = r["content"]
        except Exception:  # noqa: BLE001
            pass
    assert sent, "the interrupt condition never became true"
    return {i: out[i] for i in ids}


def _seen_for(path: Path, seconds: float):
    """A condition: ``path`` has existed for ``seconds`` (the client follows the run by then)."""
    seen = []

    def cond() -> bool:
        if not seen and path.exists():
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] >= seconds

    return cond


def _idle(msgs) -> bool:
    return any(m["msg_type"] == "status" and m["content"]["execution_state"] == "idle" for m in msgs)


def _shown(err: dict) -> list[str]:
    return [ANSI.sub("", line) for line in err["traceback"] if line.strip()]


SLOW_TUNE = """%%ray_tune --samples 2 --metric i --mode max --quiet --name {name} --space {{'a': uniform(0, 1)}}
import pathlib, time
pathlib.Path({marker!r}).touch()
for i in range(1, 400):
    report({{"i": i, "a": config["a"]}})
    time.sleep(0.1)
"""


def test_the_stop_button_in_a_ray_tune_cell_stops_run_all_and_keeps_the_grid(kernel, tmp_path):
    marker = tmp_path / "running"
    name = f"stop_{os.getpid()}_{time.monotonic_ns()}"
    cells = [SLOW_TUNE.format(name=name, marker=str(marker)), "print('the next cell ran')"]
    first, second = run_all(kernel, cells, marker.exists).values()
    assert first["reply"]["status"] == "error" and first["reply"]["ename"] == "KeyboardInterrupt", first[
        "reply"
    ]
    assert second["reply"]["status"] == "aborted", second["reply"]  # Run All stopped at the interrupt
    assert "the next cell ran" not in streams(second["msgs"])
    shown = _shown(first["reply"])
    assert len(shown) == 1 and shown[0].startswith(
        "KeyboardInterrupt: tuning interrupted: 0 trial(s) done, 2 "
        "unfinished; the results so far are in `_ray_tune_result`"
    ), shown
    assert f"re-run this cell with --name {name} --resume" in streams(first["msgs"])
    got = streams(
        kernel.run(
            "print(type(_ray_tune_result).__name__, _ray_tune_result.interrupted, "
            "sorted(r.status for r in _ray_tune_result))"
        )
    )
    assert got.strip() == "ResultGrid True ['PAUSED', 'PAUSED']", got


def test_the_stop_button_in_a_tuner_fit_cell_stops_run_all_and_get_results_has_them(kernel, tmp_path):
    marker = tmp_path / "running"
    setup = textwrap.dedent(f"""
        import pathlib, time
        from raynb import tune
        def slow(config):
            pathlib.Path({str(marker)!r}).touch()
            for i in range(1, 400):
                tune.report({{"i": i}})
                time.sleep(0.1)
        tuner = tune.Tuner(slow, param_space={{"k": tune.grid_search([1, 2])}},
                           tune_config=tune.TuneConfig(metric="i", mode="max"),
                           run_config=tune.RunConfig(verbose=0))
    """)
    assert error_of(kernel.run(setup)) is None
    first, second = run_all(
        kernel, ["grid = tuner.fit()", "print('the next cell ran')"], marker.exists
    ).values()
    assert first["reply"]["status"] == "error" and first["reply"]["ename"] == "KeyboardInterrupt", first[
        "reply"
    ]
    assert second["reply"]["status"] == "aborted", second["reply"]
    shown = _shown(first["reply"])
    assert shown[-1].startswith(
        "KeyboardInterrupt: tuning interrupted: 0 trial(s) done, 2 unfinished; "
        "the results so far are in tuner.get_results()"
    ), shown
    assert not any("raynb/" in line for line in shown), shown
    got = streams(kernel.run("print(sorted(r.status for r in tuner.get_results()))"))
    assert got.strip() == "['PAUSED', 'PAUSED']", got


def test_a_ray_train_interrupt_shows_one_line_not_the_magic_call(kernel, tmp_path):
    marker = tmp_path / "running"
    cell = (
        f"%%ray_train --workers 2\nimport pathlib, time\n# a comment the traceback must not repeat\n"
        f"pathlib.Path({str(marker)!r}).touch()\ntime.sleep(60)\n"
    )
    first, second = run_all(kernel, [cell, "print('the next cell ran')"], _seen_for(marker, 1.0)).values()
    assert second["reply"]["status"] == "aborted", second["reply"]
    shown = _shown(first["reply"])
    assert len(shown) == 1 and re.fullmatch(
        r"KeyboardInterrupt: run 'ray_train_\S+' cancelled on every rank", shown[0]
    ), shown
    assert not any("run_cell_magic" in line or "must not repeat" in line for line in shown), shown


HOLD_WORKERS = """
import pathlib, sys, time
import raynb
from raynb.train import ScalingConfig, RunConfig
from raynb.train.torch import TorchTrainer

def hold(config):
    pathlib.Path(config["up"] + str(raynb.train.get_context().get_world_rank())).touch()
    while not pathlib.Path(config["release"]).exists():
        time.sleep(0.05)

TorchTrainer(hold, train_loop_config={"up": sys.argv[1], "release": sys.argv[2]},
             scaling_config=ScalingConfig(num_workers=int(sys.argv[3])), run_config=RunConfig(verbose=0)).fit()
"""


def _reports_until(config):
    from raynb import tune

    for i in range(400):
        tune.report({"i": i})
        if os.path.exists(config["release"]):
            return
        time.sleep(0.05)


def test_trials_that_never_started_are_pending_after_an_interrupt(tmp_path, monkeypatch):
    import _thread
    import threading

    from conftest import private_cluster

    from raynb import tune

    up, release = str(tmp_path / "up"), str(tmp_path / "release")
    # Two workers at most: another client's run holds one, so of the two trials submitted
    # one runs and one waits at the head for a worker; the third is never submitted.
    with private_cluster(tmp_path, monkeypatch, workers=2, max_workers=2):
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_WORKERS, up, release, "1"],
            env=dict(os.environ, PYTHONPATH=RAYNB_ROOT),
        )
        try:
            deadline = time.monotonic() + 60
            while not Path(up + "0").exists():
                assert time.monotonic() < deadline and holder.poll() is None, "the holding run never started"
                time.sleep(0.05)
            tuner = tune.Tuner(
                _reports_until,
                param_space={"k": tune.grid_search([1, 2, 3]), "release": release},
                run_config=tune.RunConfig(verbose=0),
            )
            timer = threading.Timer(3.0, _thread.interrupt_main)
            timer.start()
            try:
                grid = tuner.fit()  # not in an IPython cell: returned, as Ray Tune does
            finally:
                timer.cancel()
            assert grid.interrupted
            assert [r.status for r in grid] == ["PAUSED", "PENDING", "PENDING"], [r.status for r in grid]
            Path(release).touch()
            assert holder.wait(timeout=60) == 0
            grid2 = tuner.fit()  # carries on: the PENDING ones start now, from scratch
            assert [r.status for r in grid2] == ["TERMINATED"] * 3, [(r.status, r.error) for r in grid2]
        finally:
            Path(release).touch()
            if holder.poll() is None:
                holder.kill()
                holder.wait()
