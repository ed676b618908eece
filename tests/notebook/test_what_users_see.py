"""Issue 9, items 15-20: what a person sees. Log floods stay bounded, every display
reads as text where widgets do not render, the progress pane tells the truth (no full
bar without a total, no clock running backwards, the last frame complete), tracebacks
show the user's cell and not raynb's frames, Tune names what it ranks by and how a
trial ended, and the CLI and README say what is true.

The kernel tests run a real ipykernel (jupyter_client) against the session cluster and
read the iopub messages a front-end would get.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from raynb.client import submit_and_follow as client_run
from raynb.notebook.run_pane.model import RunProgress
from raynb.notebook.run_pane.text import TextProgress

ROOT = Path(__file__).resolve().parents[2]
RAYNB_ROOT = str(Path(client_run.__file__).resolve().parents[2])  # the raynb under test

# Functions defined here travel by value, as a notebook's do.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
T0 = 1_700_000_000.0


def state(s, t, **kw):
    return {"kind": "state", "state": s, "time": t, **kw}


def report(rank, t, **metrics):
    return {"kind": "report", "rank": rank, "metrics": metrics, "time": t}


# ---------------------------------------------------------------- a real kernel
class Kernel:
    """An ipykernel on the session cluster; `run` returns a cell's iopub messages."""

    def __init__(self, tmp: Path):
        from jupyter_client.manager import start_new_kernel

        kdir = tmp / "jupyter" / "kernels" / "raynb-ux"
        kdir.mkdir(parents=True)
        (kdir / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                    "display_name": "raynb ux test",
                    "language": "python",
                }
            )
        )
        env = dict(
            os.environ,
            JUPYTER_PATH=str(tmp / "jupyter"),
            IPYTHONDIR=str(tmp / "ipython"),
            PYTHONPATH=os.pathsep.join([RAYNB_ROOT, os.environ.get("PYTHONPATH", "")]),
        )
        env.pop("RAYNB_PROGRESS", None)  # the kernel picks its views as in Jupyter: widgets
        old = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = env["JUPYTER_PATH"]  # where the kernel spec is looked up
        try:
            self.km, self.kc = start_new_kernel(kernel_name="raynb-ux", env=env, startup_timeout=60)
        finally:
            if old is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = old

    def run(self, code: str, timeout: float = 120.0, on_msg=None) -> list[dict]:
        msg_id = self.kc.execute(code)
        msgs = []
        deadline = time.monotonic() + timeout
        while True:
            m = self.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            msgs.append(m)
            if on_msg is not None:
                on_msg(m)
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                return msgs

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel(cluster, tmp_path_factory):
    k = Kernel(tmp_path_factory.mktemp("kernel"))
    try:
        errors = [m for m in k.run("%load_ext raynb") if m["msg_type"] == "error"]
        assert not errors, errors
        yield k
    finally:
        k.close()


def displays(msgs) -> list[dict]:
    return [m["content"] for m in msgs if m["msg_type"] in ("display_data", "update_display_data")]


def final_displays(msgs) -> list[dict]:
    """What stays in the cell: the last data of each display id (and every display without one)."""
    out: dict = {}
    for i, c in enumerate(displays(msgs)):
        out[c.get("transient", {}).get("display_id") or i] = c["data"]
    return list(out.values())


def streams(msgs) -> str:
    return "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")


def error_of(msgs) -> dict | None:
    return next((m["content"] for m in msgs if m["msg_type"] == "error"), None)


# ---------------------------------------------------------------- 15. log floods
def test_relay_shows_a_bounded_head_and_tail_and_names_the_full_log(capsys):
    from raynb.client import output_relay

    cap, tail = output_relay.MAX_SHOWN_LINES, output_relay.TAIL_LINES
    relay = output_relay.OutputRelay(all_ranks=True, path="/runs/r1")
    n = cap + 5000
    for i in range(0, n, 10):  # chunks of 10 lines, as the ranks now send them
        relay.write({"rank": 1, "stream": "stdout", "text": "".join(f"line {j}\n" for j in range(i, i + 10))})
        if i % 100 == 0:
            relay.flush()
    relay.end()
    lines = capsys.readouterr().out.splitlines()
    assert lines[:cap] == [f"(rank 1) line {j}" for j in range(cap)]
    notice = [ln for ln in lines if ln.startswith("(raynb)")]
    assert len(notice) == 2 and "/runs/r1/output.log" in notice[0] and "/runs/r1/output.log" in notice[1]
    assert f"{n - cap - tail} lines not shown" in notice[1]
    assert lines[-tail:] == [f"(rank 1) line {j}" for j in range(n - tail, n)]
    assert len(lines) == cap + 2 + tail + 1  # the cap's notice is on a line of its own


FLOOD = """
import json, os, sys, time, psutil
import raynb
from raynb import ScalingConfig, TorchTrainer

N = int(sys.argv[1])

def flood():
    for i in range(N):
        print(f"line {i} of a flood of output from this rank, long enough to be realistic")

def once():
    print("warm")

raynb.connect()
TorchTrainer(once, scaling_config=ScalingConfig(num_workers=4)).fit()   # warm: imports, buffers
proc = psutil.Process()
before = proc.memory_info().rss
t = time.monotonic()
result = TorchTrainer(flood, scaling_config=ScalingConfig(num_workers=4)).fit()
took = time.monotonic() - t
after = proc.memory_info().rss
sys.stdout.flush()
sys.stderr.write(json.dumps({"growth": after - before, "took": took, "path": result.path}) + "\\n")
raynb.disconnect()
"""


def test_log_flood_keeps_the_client_flat_and_says_where_the_log_is(warm, tmp_path):
    # Four ranks printing 60,000 lines each grew the client by hundreds of MiB (still held
    # after the run) and left it seconds behind the run.
    script = tmp_path / "flood.py"
    script.write_text(FLOOD)
    n = 60_000
    proc = subprocess.run(
        [sys.executable, str(script), str(n)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, RAYNB_PROGRESS="text"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stderr.strip().splitlines()[-1])
    print("flood:", figures)
    assert figures["growth"] < 50 * 2**20, figures
    out = proc.stdout
    log = os.path.join(figures["path"], "output.log")
    assert f"the full log: {log}" in out, [
        ln for ln in out.splitlines() if not ln.startswith("(rank 0) line")
    ]
    shown = [ln for ln in out.splitlines() if ln.startswith("(rank 0) line")]
    from raynb.client.output_relay import MAX_SHOWN_LINES, TAIL_LINES

    assert len(shown) == MAX_SHOWN_LINES + TAIL_LINES
    assert shown[-1].startswith(f"(rank 0) line {n - 1} ")
    with open(log) as f:
        assert sum(1 for _ in f) == 4 * n  # the file keeps every line of every rank


# ---------------------------------------------------------------- 16. front-ends without widgets
TRAIN_CELL = """%%ray_train --workers 2 --epochs 3
for epoch in range(3):
    report({"epoch": epoch, "loss": 1.0 / (epoch + 1)})
"""

TUNE_CELL = """%%ray_tune --samples 2 --metric acc --mode max --seed 1 --space {"x": choice([1, 2])}
report({"acc": config["x"] / 2})
"""


def test_every_display_reads_as_text_without_widgets(kernel):
    # jupyter console showed `VBox(children=(HTML(value="<b>ray_train_...` for the live pane
    # and `<IPython.core.display.HTML object>` for the summary.
    msgs = kernel.run(TRAIN_CELL)
    assert error_of(msgs) is None, error_of(msgs)
    shown = displays(msgs)
    assert len(shown) >= 2  # the live pane, and the summary that replaces it
    for c in shown:
        text = c["data"].get("text/plain", "")
        assert re.match(r"\[ray_train_\S+\] (PENDING|RUNNING|FINISHED)", text), text
    final = shown[-1]["data"]["text/plain"].splitlines()
    assert re.match(r"\[ray_train_\S+\] FINISHED in [\d.]+s \| epochs done 3/3$", final[0]), final
    assert "  metrics: loss=0.3333" in final[1]

    msgs = kernel.run(TUNE_CELL)
    assert error_of(msgs) is None, error_of(msgs)
    shown = displays(msgs)
    assert len(shown) >= 2
    for c in shown:
        text = c["data"].get("text/plain", "")
        assert text.startswith("== Tune ") and "VBox(" not in text and "<IPython" not in text, text
    final = shown[-1]["data"]["text/plain"]
    assert "2 trials: 2 TERMINATED" in final and "trial_id" in final, final


# ---------------------------------------------------------------- 17. the progress pane
def test_no_total_shows_a_counter_and_no_full_bar():
    from raynb.notebook.run_pane.widget import ProgressPane

    p = RunProgress("r", world_size=2)
    pane = ProgressPane(p, trailing=False)
    pane.handle(state("RUNNING", T0))
    for step in range(10):
        for rank in (0, 1):
            pane.handle(report(rank, T0 + step, step=step, loss=1.0 / (step + 1)))
    pane.refresh(force=True)
    for rank in (0, 1):  # step 10 of an unknown 240: not a full bar
        assert pane.bars[rank].value < pane.bars[rank].max
        assert pane._bar_labels[rank].value.startswith("10 steps (no total)")
    assert "steps done 10" in pane.header.value
    assert "width:0%" in p.summary_html(plot=False) and "10 steps (no total)" in p.summary_html(plot=False)
    pane.finish()


def test_elapsed_never_goes_backwards_at_the_end():
    # A busy client read RUNNING 10.2 s, then the head's end time made it FINISHED 9.9 s.
    clock = [T0 + 10.2]
    p = RunProgress("r", world_size=1, clock=lambda: clock[0])
    out = io.StringIO()
    view = TextProgress(p, stream=out)
    view.handle(state("RUNNING", T0))
    view.handle(report(0, T0 + 1, loss=0.5))
    live = p.elapsed_s
    assert live == pytest.approx(10.2)
    view.handle(state("FINISHED", T0 + 9.9))
    view.finish()
    assert p.elapsed_s >= live
    times = [float(x) for x in re.findall(r"(?:RUNNING|after|in) ([\d.]+)s", out.getvalue())]
    assert times == sorted(times), out.getvalue()


def test_final_frame_has_every_ranks_last_report_and_the_final_curve():
    # The pane's last frame drew the curve of step 12 while the table said 15/15, and a
    # rank was left at 14/15.
    import base64

    from raynb.notebook.formatting import render_curve_png
    from raynb.notebook.run_pane.widget import ProgressPane

    now = [0.0]
    p = RunProgress("r", world_size=4, total_epochs=15)
    pane = ProgressPane(p, min_interval_s=1.0, trailing=False, clock=lambda: now[0])
    pane.handle(state("RUNNING", T0))
    for epoch in range(15):
        # A curve is drawn up to epoch 12; the last reports and the end come within the
        # throttle's interval of it.
        now[0] += 1.1 if epoch < 12 else 0.01
        for rank in range(4):
            pane.handle(
                report(rank, T0 + epoch, epoch=epoch, loss=1.0 / (epoch + 1), training_iteration=epoch + 1)
            )
    pane.handle(state("FINISHED", T0 + 16))
    pane.finish()
    assert [(b.value, b.max) for b in pane.bars.values()] == [(15, 15)] * 4
    assert all(lbl.value.startswith("15/15 epochs") for lbl in pane._bar_labels.values())
    final_curve = render_curve_png(*p.loss_series(), "loss")
    assert bytes(pane.plot.value) == final_curve
    assert base64.b64encode(final_curve).decode() in pane.summary
    assert pane.summary.count("15/15 epochs") == 4


# ---------------------------------------------------------------- 18. tracebacks
def _short_and_clean(err: dict) -> str:
    tb = "\n".join(err["traceback"])
    assert "raynb/" not in tb and "IPython/" not in tb and "ipykernel" not in tb, tb
    assert len(err["traceback"]) <= 8, tb
    return tb


def test_unpicklable_variable_shows_the_cell_and_the_message(kernel):
    # 25-35 lines of magics.py, runner.py and shipping.py came before the one that matters.
    assert error_of(kernel.run("import threading\nlock = threading.Lock()")) is None
    err = error_of(kernel.run("%%ray_train --workers 2\nwith lock:\n    pass\n"))
    assert err is not None and err["ename"] == "UnpicklableError"
    tb = _short_and_clean(err)
    assert "Cell In[" in tb and "UnpicklableError: cannot send variable 'lock'" in tb, tb
    # The same from a plain cell: the user's own line is kept.
    code = "from raynb import TorchTrainer\ndef uses_lock():\n    with lock:\n        pass\nTorchTrainer(uses_lock).fit()\n"
    tb = _short_and_clean(error_of(kernel.run(code)))
    assert "----> TorchTrainer(uses_lock).fit()" in tb and "cannot send variable 'lock'" in tb, tb


def test_interrupt_shows_one_line_and_no_raynb_frames(kernel):
    cell = '%%ray_train --workers 2\nimport time\nprint("started", flush=True)\ntime.sleep(60)\n'
    sent = []

    def interrupt_once(m):
        if not sent and m["msg_type"] == "stream" and "started" in m["content"]["text"]:
            sent.append(time.monotonic())
            kernel.km.interrupt_kernel()

    msgs = kernel.run(cell, on_msg=interrupt_once)
    assert sent, streams(msgs)
    err = error_of(msgs)
    assert err is not None and err["ename"] == "KeyboardInterrupt", err
    tb = _short_and_clean(err)
    cancelled = re.search(r"KeyboardInterrupt: run '(ray_train_\S+)' cancelled on every rank", tb)
    assert cancelled, tb
    # As after a failure, `_ray_result` is the run's Result (it was left unset, or the last run's).
    shown = streams(kernel.run("print(_ray_result.name, _ray_result.state)"))
    assert shown.split() == [cancelled.group(1), "CANCELLED"], shown


def test_a_rank_error_is_named_once_in_the_cell(kernel):
    cell = (
        "%%ray_train --workers 4\nfrom raynb.train import get_context\n"
        "if get_context().get_world_rank() == 2:\n    raise ValueError('boom')\n"
    )
    msgs = kernel.run(cell)
    err = error_of(msgs)
    # Ray Train's class for a rank's failure (a RunError too, raynb's name for it)
    assert err is not None and err["ename"] == "WorkerGroupError", err
    tb = "\n".join(err["traceback"])
    finals = final_displays(msgs)
    line = "rank 2 raised ValueError: boom"
    # What a console shows (text), and what JupyterLab shows (HTML): once each.
    console = streams(msgs) + "".join(d.get("text/plain", "") for d in finals) + tb
    lab = streams(msgs) + "".join(d.get("text/html", "") for d in finals) + tb
    assert console.count(line) == 1, console
    assert lab.count(line) == 1, lab
    assert "ValueError: boom" in tb and "--- remote traceback (rank 2" in tb


# ---------------------------------------------------------------- 19. Tune
def test_header_best_and_the_column_name_different_things_differently():
    # "best ... 0.9694" in the header (the latest value that ranks) and a column "best
    # val_accuracy" of 0.9722 (the best a trial ever reported) used the same word.
    from raynb.notebook.trial_table.model import TuneProgress

    p = TuneProgress("val_accuracy", "max", 2, ["lr"])
    p.add_trial("t0", {"lr": 0.1})
    for it, acc in enumerate((0.9722, 0.9694), start=1):
        p.add_result("t0", {"training_iteration": it, "val_accuracy": acc})
    line = "best trial t0 by last result: val_accuracy 0.9694 (max val_accuracy 0.9722)"
    assert line in p.status_line()
    assert "best trial <b>t0</b> by last result: val_accuracy 0.9694" in p.header_html()
    df = p.dataframe()
    assert list(df.columns[-2:]) == ["val_accuracy", "max val_accuracy"]
    assert (df.loc[0, "val_accuracy"], df.loc[0, "max val_accuracy"]) == (0.9694, 0.9722)
    assert "best" not in " ".join(df.columns)


def test_a_tune_stop_ends_the_run_stopped(tmp_path):
    from support.controller_harness import Harness

    h = Harness(tmp_path)
    run = h.running()
    h.ctl.cancel(run, stop=True)
    assert run.state == "CANCELLING"
    for r in range(3):
        h.ctl.rank_returned(run, r, "cancelled")
    assert run.state == "STOPPED" and h.effects.done[0]["state"] == "STOPPED"
    queued = h.run()
    h.ctl.cancel(queued, stop=True)
    assert queued.state == "STOPPED"
    plain = h.running()
    h.ctl.cancel(plain)  # an interrupt, or PBT's exploit: still CANCELLED
    for r in range(3):
        h.ctl.rank_returned(plain, r, "cancelled")
    assert plain.state == "CANCELLED"


def slow_scores(config):
    import time

    from raynb import tune

    for i in range(10):
        tune.report({"score": config["x"] + i})
        time.sleep(0.2)  # the STOP lands while the trial still runs


def test_runs_groups_trials_by_experiment_and_a_stopped_trial_reads_stopped(warm, tmp_path):
    import raynb
    from raynb import Result, tune
    from raynb.cluster.storage.rundir import read_run_dir
    from raynb.train import RunConfig
    from raynb.tune.schedulers import FIFOScheduler

    class StopTheSecond(FIFOScheduler):
        def on_trial_result(self, trial, result):
            return (
                self.STOP if trial.config["x"] == 1 and result["training_iteration"] >= 2 else self.CONTINUE
            )

    grid = tune.Tuner(
        slow_scores,
        param_space={"x": tune.grid_search([0, 1])},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=StopTheSecond()),
        run_config=RunConfig(name="ux_grouped", storage_path=str(tmp_path), verbose=0),
    ).fit()
    by_x = {r.config["x"]: r for r in grid}
    assert grid.num_errors == 0
    trials = raynb.runs(experiment="ux_grouped")
    assert len(trials) == 2 and set(trials["experiment"]) == {"ux_grouped"}
    states = dict(zip(trials["path"], trials["state"]))
    assert states[by_x[0].path] == "FINISHED"
    assert states[by_x[1].path] == "STOPPED"
    assert read_run_dir(by_x[1].path, with_reports=False)["state"] == "STOPPED"
    stopped = Result.from_path(by_x[1].path)
    assert stopped.state == "STOPPED" and stopped.error is None
    everything = raynb.runs()
    assert "ux_grouped" in set(everything["experiment"].dropna())
    assert "ux_grouped" not in set(raynb.runs(trials=False)["experiment"].dropna())
    assert set(raynb.runs(kind="slow_scores")["experiment"]) >= {"ux_grouped"}


# ---------------------------------------------------------------- 20. CLI
def _cli(env, *args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "raynb.cli", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def private_home(tmp_path):
    """A RAYNB_HOME and storage of the test's own; any cluster started there is stopped after."""
    env = dict(os.environ, RAYNB_HOME=str(tmp_path / "home"), RAYNB_STORAGE_PATH=str(tmp_path / "runs"))
    env.pop("RAYNB_KEEP_CLUSTER", None)
    yield env
    _cli(env, "stop")


def test_version_and_a_bare_raynb_prints_the_help(private_home):
    import raynb

    v = _cli(private_home, "--version")
    assert v.returncode == 0 and v.stdout.strip() == f"raynb {raynb.__version__}"
    bare = _cli(private_home)
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout.startswith("usage: raynb") and "status" in bare.stdout and "demo" in bare.stdout
    assert "required" not in bare.stdout + bare.stderr


SLEEPER = """
import raynb
from raynb import ScalingConfig, TorchTrainer, RunConfig

def nap():
    import time
    time.sleep(30)

TorchTrainer(nap, scaling_config=ScalingConfig(num_workers=1), run_config=RunConfig(name="napping", verbose=0)).fit()
"""


def test_status_has_cpu_and_rss_right_after_start_and_lists_the_active_run(private_home, monkeypatch):
    from raynb.client.status import format_status
    from raynb.cluster.launch import start_cluster
    from raynb.cluster.protocol.control import Client

    for k in ("RAYNB_HOME", "RAYNB_STORAGE_PATH"):
        monkeypatch.setenv(k, private_home[k])
    info, started = start_cluster(num_workers=2)
    assert started
    client = Client(info["address"], info["key"].encode(), info)
    try:
        text = format_status(client.status())  # at once: before the node agent's first sample
    finally:
        client.close()
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("worker"))
    workers = [ln.split() for ln in lines[head + 1 :] if ln.startswith("local-w")]
    assert len(workers) == 2, text
    for row in workers:  # worker, pid, state, kind, cpu%, rss (and no rank, no run: idle)
        assert row[3] == "torch", text
        assert re.fullmatch(r"[\d.]+", row[4]) and re.fullmatch(r"\d+MiB", row[5]), text
    sleeper = subprocess.Popen(
        [sys.executable, "-c", SLEEPER],
        env=private_home,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while "napping  RUNNING  world size 1" not in (out := _cli(private_home, "status").stdout):
            assert time.monotonic() < deadline, out
            time.sleep(0.2)
        assert "1 active" in out
    finally:
        sleeper.kill()
        sleeper.wait()


SCRIPT = """
import json, sys
import raynb
from raynb.cluster.launch import cluster_pids
from raynb.cluster.connection_file import read_connection_file

raynb.connect(num_workers=1)
print(json.dumps(cluster_pids(read_connection_file())))
"""


def test_a_script_says_what_becomes_of_its_cluster_and_stops_it_at_exit(private_home):
    # "It keeps running for later cells" was printed by a plain script too, whose cluster
    # then silently outlived it with 1.1 GB.
    from conftest import alive

    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=private_home, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    said, pids = proc.stdout.splitlines()[0], json.loads(proc.stdout.splitlines()[-1])
    assert "later cells" not in said and "it stops when this script exits" in said, said
    assert "RAYNB_KEEP_CLUSTER=1" in said
    deadline = time.monotonic() + 10
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pids), f"the script's cluster outlived it: {alive(pids)}"
    assert "no raynb cluster is running" in _cli(private_home, "status").stdout

    keep = dict(private_home, RAYNB_KEEP_CLUSTER="1")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=keep, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "it outlives this script" in proc.stdout and "`raynb stop` ends it" in proc.stdout
    kept = json.loads(proc.stdout.splitlines()[-1])
    assert alive(kept) and "local-w1" in _cli(private_home, "status").stdout
    assert _cli(private_home, "stop").returncode == 0


TERMINATED = """
import json
import raynb
from raynb import RunConfig, ScalingConfig, TorchTrainer
from raynb.cluster.launch import cluster_pids
from raynb.cluster.connection_file import read_connection_file

def long_run():
    import time
    from raynb.train import report
    for i in range(600):
        report({"i": i})
        time.sleep(0.1)

raynb.connect(num_workers=2)
print("PIDS", json.dumps(cluster_pids(read_connection_file())), flush=True)
TorchTrainer(long_run, scaling_config=ScalingConfig(num_workers=2),
             run_config=RunConfig(name="terminated", verbose=0)).fit()
"""


def test_a_sigterm_to_a_script_cancels_its_run_and_stops_the_cluster_it_started(private_home):
    # Python's default SIGTERM ended the script at once: its run went on for its whole
    # minute with nobody following it, and the cluster it started outlived it
    # (client/script_exit.py; a Ray driver exits on SIGTERM the same way).
    from conftest import alive

    proc = subprocess.Popen(
        [sys.executable, "-c", TERMINATED],
        env=private_home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = ""
        while not line.startswith("PIDS"):
            line = proc.stdout.readline()
            assert line or proc.poll() is None, proc.stderr.read()
        pids = json.loads(line.split(" ", 1)[1])
        result = Path(private_home["RAYNB_STORAGE_PATH"]) / "terminated" / "result.json"
        deadline = time.monotonic() + 60
        while not (result.exists() and result.read_text().count("\n") >= 3):  # running, reporting
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
        proc.terminate()
        assert proc.wait(timeout=30) == 143, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 20
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pids), f"the script's cluster outlived its SIGTERM: {alive(pids)}"
    record = json.loads((result.parent / "run.json").read_text())
    assert record["state"] == "CANCELLED", record
    assert record["num_reports"] < 100, record  # cancelled at once, not run to its end


# ---------------------------------------------------------------- 20. the docs' snippets
def _readme_python_blocks(heading: str, page: str = "README.md") -> list[str]:
    """The ```python blocks of ``page``'s section whose heading starts with ``heading``
    (a page's title counts as a heading)."""
    text = (ROOT / page).read_text()
    for section in re.split(r"^#{1,3} ", text, flags=re.M):
        if section.startswith(heading):
            return re.findall(r"```python\n(.*?)```", section, flags=re.S)
    raise AssertionError(f"{page} has no section {heading!r}")


def _run_readme_script(blocks: list[str], tmp_path) -> str:
    for b in blocks:
        assert "..." not in b, f"a README snippet that does not run as written:\n{b}"
    script = tmp_path / "readme_snippet.py"
    script.write_text("\n".join(blocks))
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=dict(os.environ, RAYNB_PROGRESS="text"),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_readme_torchtrainer_snippet_runs_and_gives_the_weights_back(warm, tmp_path):
    data = next(
        b for b in _readme_python_blocks("The notebook", "docs/notebook.md") if "class DigitsCNN" in b
    )
    (trainer,) = _readme_python_blocks("The same cell with `TorchTrainer`", "docs/notebook.md")
    out = _run_readme_script([data, trainer], tmp_path)
    m = re.search(r"reloaded weights: ([\d.]+) validation accuracy", out)
    assert m and float(m.group(1)) > 0.9, out[-2000:]


def test_readme_tune_snippet_runs(warm, tmp_path):
    data = next(
        b for b in _readme_python_blocks("The notebook", "docs/notebook.md") if "class DigitsCNN" in b
    )
    (tuning,) = _readme_python_blocks("Hyperparameter tuning", "docs/tune.md")
    out = _run_readme_script([data, tuning], tmp_path)
    assert "== Tune finished: 16 trials" in out, out[-2000:]
    m = re.search(r"'lr': [\d.e-]+.*val_accuracy ([\d.]+)$", out, flags=re.M)
    assert m and float(m.group(1)) > 0.8, out[-2000:]


def test_the_readme_script_trains(warm, tmp_path):
    (script,) = [b for b in _readme_python_blocks("In a notebook") if "TorchTrainer(" in b]
    out = _run_readme_script([script], tmp_path)
    assert float(out.strip().splitlines()[-1]) < 1.0, out[-2000:]
