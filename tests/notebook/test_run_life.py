"""A run's life around the notebook: kernel restarts, notebook classes saved on a rank,
custom samplers, two kernels starting the cluster, a head killed under the notebook.

Real kernels (jupyter_client), real clusters (the session's, or a private one in a
temporary RAYNB_HOME where the item is about starting or losing a cluster), and
real processes: the scripts run as ``__main__``, as a notebook's code does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from contextlib import contextmanager

import cloudpickle
import pytest
from conftest import alive, wait_idle_workers

import raynb
from raynb.train import RunConfig, ScalingConfig

# Functions defined here travel by value, as a notebook's do.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

QUIET = RunConfig(verbose=0)
FOUR = ScalingConfig(num_workers=4)


# -- item 6: a kernel restart or shutdown leaves the run running ----------------------------

SLOW_RUN_CELL = """
import raynb
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

def slow():
    import time
    from raynb.train import report
    for i in range({steps}):
        time.sleep(0.5)
        report({{"step": i}})

TorchTrainer(slow, scaling_config=ScalingConfig(num_workers=2),
             run_config=RunConfig(name={name!r}, verbose=0)).fit()
"""


def _run_state(client, name: str) -> str | None:
    for r in client.status()["runs"]:
        if r["name"] == name:
            return r["state"]
    return None


def _wait_state(client, name: str, states, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        state = _run_state(client, name)
        if state in states:
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"run {name!r} is {state}, never {states}")
        time.sleep(0.05)


@contextmanager
def _kernel(tmp_path):
    """A real IPython kernel (jupyter_client), seeing the session cluster's RAYNB_HOME."""
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=dict(os.environ, IPYTHONDIR=str(tmp_path / "ipython")))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        yield km, kc
    finally:
        kc.stop_channels()
        if km.is_alive():
            km.shutdown_kernel(now=True)


def _reply(kc, msg_id: str, timeout: float = 60.0) -> dict:
    """The execute_reply content of request ``msg_id``."""
    deadline = time.monotonic() + timeout
    while True:
        reply = kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply["content"]


def _execute(kc, code: str, timeout: float = 60.0) -> tuple[dict, str]:
    """Run ``code`` in the kernel and wait for it: (execute_reply content, its output)."""
    msg_id = kc.execute(code)
    out = []
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(msg["content"]["traceback"]))
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    return _reply(kc, msg_id, max(0.1, deadline - time.monotonic())), "".join(out)


def _start_slow_run(warm, kc, steps: int = 20) -> tuple[str, str]:
    """Start a 2-rank run of ``steps`` half-seconds in the kernel; (its name, the
    cell's msg_id) once the kernel follows it."""
    wait_idle_workers(warm, 4)
    name = f"life-{uuid.uuid4().hex[:8]}"
    msg_id = kc.execute(SLOW_RUN_CELL.format(steps=steps, name=name))
    _wait_state(warm, name, ("RUNNING",))
    time.sleep(1.0)  # the kernel is in follow_run by now
    return name, msg_id


@pytest.mark.parametrize("how", ["restart", "shutdown"])
def test_kernel_restart_or_shutdown_leaves_the_run_running(warm, tmp_path, how):
    with _kernel(tmp_path) as (km, kc):
        name, _ = _start_slow_run(warm, kc)
        t0 = time.monotonic()
        if how == "restart":
            km.restart_kernel()  # graceful: SIGINT, then shutdown_request, as Jupyter's button
        else:
            km.shutdown_kernel()
        took = time.monotonic() - t0
        # The interrupt before the shutdown_request did not cancel it.
        assert _run_state(warm, name) == "RUNNING", raynb.runs()[["name", "state"]]
        print(f"graceful {how} took {took:.2f}s; the run stayed RUNNING")
        if how == "restart":
            kc.wait_for_ready(timeout=60)
            reply, out = _execute(
                kc, f"import raynb\nprint('STATE', raynb.attach({name!r}, verbose=0).state)"
            )
            assert reply["status"] == "ok", out
            assert "STATE FINISHED" in out, out
        else:
            assert raynb.attach(name, verbose=0).state == "FINISHED"
    assert raynb.get_run(name).state == "FINISHED"


def test_interrupting_the_kernel_still_cancels_every_rank(warm, tmp_path):
    with _kernel(tmp_path) as (km, kc):
        name, msg_id = _start_slow_run(warm, kc)
        t0 = time.monotonic()
        km.interrupt_kernel()
        _wait_state(warm, name, ("CANCELLED",), timeout=10)
        latency = time.monotonic() - t0
        print(f"interrupt -> CANCELLED on the head: {latency:.2f}s")
        assert latency < 2.0, f"the cancel took {latency:.1f}s"
        # The cell said it was cancelled, and the kernel is usable again.
        cell = _reply(kc, msg_id, timeout=10)
        assert cell["status"] == "error" and cell["ename"] == "KeyboardInterrupt", cell
        assert "cancelled on every rank" in cell["evalue"], cell
        reply, out = _execute(kc, "print('alive')")
        assert reply["status"] == "ok" and "alive" in out


# -- item 7: a notebook class saved with torch.save on a rank --------------------------------

SAVE_MODEL_SCRIPT = """
import os, sys, tempfile
import torch
import raynb
from raynb.train import Checkpoint, RunConfig, ScalingConfig, get_context, report
from raynb.train.fit_run import execute_run
from raynb.train.torch import TorchTrainer

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x)

def save_model():
    torch.manual_seed(get_context().get_world_rank())
    model = Net()
    with tempfile.TemporaryDirectory() as d:
        if get_context().get_world_rank() == 0:
            torch.save(model, os.path.join(d, "model.pt"))
            report({"saved": 1}, checkpoint=Checkpoint.from_directory(d))
        else:
            report({"saved": 0})
    return {k: v.tolist() for k, v in model.state_dict().items()}

def main_has_net():
    import __main__
    return hasattr(__main__, "Net")

def save_with_lambda():
    model = Net()
    model.act = lambda x: x
    torch.save(model, os.path.join(tempfile.mkdtemp(), "model.pt"))

TWO = ScalingConfig(num_workers=2)
result = TorchTrainer(save_model, scaling_config=TWO, run_config=RunConfig(verbose=0)).fit()
with result.checkpoint.as_directory() as d:
    model = torch.load(os.path.join(d, "model.pt"), weights_only=False)
print("LOADED", type(model).__module__, type(model).__name__, type(model) is Net)
torch.manual_seed(0)
print("EQUAL", all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), Net().state_dict().values())))
# What one run installed in the workers' __main__ is gone in the next one.
print("LEAKED", execute_run(main_has_net, None, TWO, RunConfig(verbose=0))[1])
try:
    TorchTrainer(save_with_lambda, scaling_config=TWO, run_config=RunConfig(verbose=0)).fit()
except raynb.RunError as e:
    print("ERROR", str(e).splitlines()[0])
"""


def _script(tmp_path, name: str, source: str, env: dict | None = None, timeout: float = 180):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or dict(os.environ),
        cwd=str(tmp_path),
    )


def test_notebook_class_saved_on_a_rank_loads_in_the_notebook(warm, tmp_path):
    wait_idle_workers(warm, 4)
    p = _script(tmp_path, "notebook.py", SAVE_MODEL_SCRIPT)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "LOADED __main__ Net True" in out, out
    assert "EQUAL True" in out, out  # rank 0's parameters (seed 0), as saved
    assert "LEAKED False" in out, out
    error = next(line for line in out.splitlines() if line.startswith("ERROR"))
    assert "lambda" in error and "state_dict()" in error, error


# -- item 8: prepare_data_loader keeps a custom sampler's meaning -----------------------------


def _draws(config):
    """Every rank's indices per epoch, gathered on rank 0: {epoch: [rank 0's, rank 1's, ...]}."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import BatchSampler, DataLoader, TensorDataset, WeightedRandomSampler

    from raynb.train.torch import prepare_data_loader

    weights = torch.zeros(100)
    weights[90:] = 1.0  # 90 of the 100 items can never be drawn
    ds = TensorDataset(torch.arange(100))
    sampler = WeightedRandomSampler(weights, num_samples=100, replacement=True)
    if config["batch_sampler"]:
        loader = DataLoader(ds, batch_sampler=BatchSampler(sampler, batch_size=8, drop_last=False))
    else:
        loader = DataLoader(ds, batch_size=5, sampler=sampler)
    loader = prepare_data_loader(loader)
    out = {}
    for epoch in range(2):
        mine = [batch[0].tolist() for batch in loader]
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        out[epoch] = everyone
    return {"len": len(loader), "draws": out}


@pytest.mark.parametrize("batch_sampler", [False, True], ids=["sampler", "batch_sampler"])
def test_custom_sampler_is_sharded_not_dropped(warm, batch_sampler):
    from raynb.train.fit_run import execute_run

    runs = [execute_run(_draws, {"batch_sampler": batch_sampler}, FOUR, QUIET)[1] for _ in range(2)]
    first, again = runs
    expected_len = 4 if batch_sampler else 5  # 13 batches of 8 over 4 ranks; 25 items in batches of 5
    assert first["len"] == expected_len
    for epoch, ranks in first["draws"].items():
        flat = [[i for batch in batches for i in batch] for batches in ranks]
        assert all(i >= 90 for items in flat for i in items), f"zero-weight items drawn: {flat}"
        assert len({tuple(items) for items in flat}) == 4, "two ranks drew the same indices"
        assert all(len(batches) == expected_len for batches in ranks)
        if batch_sampler:
            assert all(len(b) == 8 for batches in ranks for b in batches[:-1])  # whole batches
    assert first["draws"] == again["draws"], "the same epoch drew differently in a second run"
    assert first["draws"][0] != first["draws"][1], "two epochs drew the same indices"


# -- item 9: two kernels starting the local cluster at the same moment -------------------------

RACE_SCRIPT = """
import os, sys, time
import raynb
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

def world():
    from raynb.train import get_context
    return get_context().get_world_size()

open(sys.argv[1] + ".ready", "w").close()
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
client = raynb.connect(num_workers=2)
result = TorchTrainer(world, scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(verbose=0)).fit()
print("HEAD", client.info["pids"]["head"], result.state)
"""


@contextmanager
def _private_home(tmp_path):
    """A RAYNB_HOME of the test's own; its cluster (if any) is stopped and checked gone after."""
    from raynb.cluster.connection_file import read_connection_file
    from raynb.cluster.launch import cluster_pids

    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, RAYNB_HOME=str(home), RAYNB_STORAGE_PATH=str(tmp_path / "results"))
    seen: set[int] = set()

    def note_pids():
        info = read_connection_file(home / "cluster.json")
        if info is not None:
            seen.update(cluster_pids(info))

    try:
        yield env, note_pids
    finally:
        note_pids()
        subprocess.run([sys.executable, "-m", "raynb.cli", "stop"], env=env, capture_output=True, timeout=60)
        deadline = time.monotonic() + 10
        while alive(seen) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(seen), f"raynb processes left behind: {alive(seen)}"


def test_two_processes_starting_the_cluster_at_once_share_it(tmp_path):
    (tmp_path / "race.py").write_text(textwrap.dedent(RACE_SCRIPT))
    go = tmp_path / "go"
    with _private_home(tmp_path) as (env, note_pids):
        procs = [
            subprocess.Popen(
                [sys.executable, str(tmp_path / "race.py"), str(tmp_path / f"p{i}"), str(go)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for i in range(2)
        ]
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"p{i}.ready").exists() for i in range(2)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
            time.sleep(0.05)
        go.touch()  # both call raynb.connect() now
        outs = [p.communicate(timeout=180)[0] for p in procs]
        note_pids()
        assert [p.returncode for p in procs] == [0, 0], "\n---\n".join(outs)
        heads = [
            next(line.split()[1:] for line in out.splitlines() if line.startswith("HEAD")) for out in outs
        ]
        assert heads[0] == heads[1] and heads[0][1] == "FINISHED", heads  # one cluster, both ran


# The grace after another client's last use that the clusters of the two tests below
# wait out (the default is 10 s): shorter, so that waiting past it takes less time.
CLIENT_GRACE_S = 3.0

OWNER_SCRIPT = """
import os, sys, time
import raynb

raynb.connect(num_workers=2)
open(sys.argv[1] + ".started", "w").close()
while not os.path.exists(sys.argv[2]):   # the other script's run is running
    time.sleep(0.01)
"""

GUEST_SCRIPT = """
import os, sys, time
import raynb
from raynb.train import RunConfig, ScalingConfig, report
from raynb.train.torch import TorchTrainer

def outlives_the_owner(config):
    open(config["running"], "w").close()
    while not config["owner_gone"]():
        time.sleep(0.05)
    report({"after_owner_exit": 1})

while not os.path.exists(sys.argv[1] + ".started"):
    time.sleep(0.01)
client = raynb.connect()
owner = int(sys.argv[3])

def owner_gone():
    try:
        os.kill(owner, 0)
        return False
    except ProcessLookupError:
        return True

result = TorchTrainer(outlives_the_owner, train_loop_config={"running": sys.argv[2], "owner_gone": owner_gone},
                      scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(verbose=0)).fit()
print("GUEST", client.info["pids"]["head"], result.state, result.metrics.get("after_owner_exit"))
"""


def test_a_script_exiting_leaves_its_cluster_up_for_another_clients_run_then_it_stops(tmp_path):
    # The owner's atexit stop failed the other script's active run ("the raynb cluster was
    # stopped ... while this run was active"): it now waits until no one else uses it.
    from raynb.cluster.connection_file import read_connection_file
    from raynb.cluster.launch import cluster_pids

    (tmp_path / "owner.py").write_text(textwrap.dedent(OWNER_SCRIPT))
    (tmp_path / "guest.py").write_text(textwrap.dedent(GUEST_SCRIPT))
    running = tmp_path / "guest-running"
    with _private_home(tmp_path) as (env, note_pids):
        env["RAYNB_CLIENT_GRACE_S"] = str(CLIENT_GRACE_S)
        owner = subprocess.Popen(
            [sys.executable, str(tmp_path / "owner.py"), str(tmp_path / "o"), str(running)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        guest = subprocess.Popen(
            [sys.executable, str(tmp_path / "guest.py"), str(tmp_path / "o"), str(running), str(owner.pid)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        out, err = owner.communicate(timeout=180)
        note_pids()
        pids = cluster_pids(read_connection_file(tmp_path / "home" / "cluster.json") or {})
        assert owner.returncode == 0, out + err
        assert "stays up while another client uses it (1 active run(s) of other clients" in err, err
        said = guest.communicate(timeout=120)[0]
        assert guest.returncode == 0, said
        assert "FINISHED 1" in said, said  # its run ended well, after the owner had gone
        deadline = time.monotonic() + CLIENT_GRACE_S + 20  # the head stops by itself
        while alive(pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pids and not alive(pids), f"the cluster outlived both scripts: {alive(pids)}"
        assert read_connection_file(tmp_path / "home" / "cluster.json") is None


def test_raynb_start_keeps_a_scripts_cluster_up_after_the_script_exits(tmp_path):
    """A script's cluster stops when the script exits (once no one else uses it); `raynb
    start` run meanwhile says it is already running and keeps it, as a `ray start`
    cluster outlives its drivers: the script's exit leaves it up past any grace, and
    `raynb stop` still ends it."""
    from raynb.cluster.connection_file import read_connection_file
    from raynb.cluster.launch import cluster_pids

    (tmp_path / "owner.py").write_text(textwrap.dedent(OWNER_SCRIPT))
    go = tmp_path / "go"
    with _private_home(tmp_path) as (env, note_pids):
        env["RAYNB_CLIENT_GRACE_S"] = str(CLIENT_GRACE_S)
        owner = subprocess.Popen(
            [sys.executable, str(tmp_path / "owner.py"), str(tmp_path / "o"), str(go)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while not (tmp_path / "o.started").exists():
            assert time.monotonic() < deadline and owner.poll() is None, owner.communicate()
            time.sleep(0.05)
        note_pids()
        started = subprocess.run(
            [sys.executable, "-m", "raynb.cli", "start"], env=env, capture_output=True, text=True, timeout=60
        )
        assert started.returncode == 0 and "already running" in started.stdout, started
        assert "could not keep" not in started.stderr, started.stderr
        status = subprocess.run(
            [sys.executable, "-m", "raynb.cli", "status"], env=env, capture_output=True, text=True, timeout=60
        )
        assert "stops by itself" not in status.stdout and "kept up by `raynb start`" in status.stdout, (
            status.stdout
        )
        go.touch()
        out, err = owner.communicate(timeout=60)
        assert owner.returncode == 0, out + err
        assert "stays up: `raynb start` keeps it" in err, err
        pids = cluster_pids(read_connection_file(tmp_path / "home" / "cluster.json") or {})
        time.sleep(CLIENT_GRACE_S + 3)  # past the grace that `raynb start`'s own hello earned
        assert pids and set(alive(pids)) == set(pids), f"the kept cluster stopped: {alive(pids)}"
        stop = subprocess.run(
            [sys.executable, "-m", "raynb.cli", "stop"], env=env, capture_output=True, text=True, timeout=60
        )
        assert "raynb cluster stopped" in stop.stdout, stop
        deadline = time.monotonic() + 10
        while alive(pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pids), f"raynb stop left: {alive(pids)}"


# -- item 10: the local head killed under a live notebook --------------------------------------

KILLED_HEAD_SCRIPT = """
import os, signal, threading, time
import raynb
from raynb.cluster.connection_file import head_alive
from raynb.cluster.launch import cluster_pids
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

TWO, Q = ScalingConfig(num_workers=2), RunConfig(verbose=0)

def world():
    from raynb.train import get_context
    return get_context().get_world_size()

def sleepy():
    import time
    time.sleep(60)

def kill_head(client):
    head = client.info["pids"]["head"]
    os.kill(head, signal.SIGKILL)  # only that pid: the rest of the cluster follows it
    while head_alive(client.info):
        time.sleep(0.01)
    return head

client = raynb.connect(num_workers=2)
TorchTrainer(world, scaling_config=TWO, run_config=Q).fit()
print("OLD", *cluster_pids(client.info), flush=True)
print("KILLED", kill_head(client), flush=True)
t0 = time.monotonic()
result = TorchTrainer(world, scaling_config=TWO, run_config=Q).fit()  # the next cell
print("NEXT_FIT_S", round(time.monotonic() - t0, 2), result.state, flush=True)

# Killed while a run is followed: the cell fails at once, not after 10 s of silence.
client = raynb.connect(num_workers=2)
print("OLD", *cluster_pids(client.info), flush=True)
timer = threading.Timer(1.0, kill_head, (client,))
timer.start()
t0 = time.monotonic()
try:
    TorchTrainer(sleepy, scaling_config=TWO, run_config=Q).fit()
except raynb.ClusterError as e:
    print("FOLLOW_FAILED_S", round(time.monotonic() - t0 - 1.0, 2), e, flush=True)
timer.join()
print("AGAIN", TorchTrainer(world, scaling_config=TWO, run_config=Q).fit().state, flush=True)
"""


def test_a_killed_head_is_noticed_and_a_fresh_cluster_started(tmp_path):
    with _private_home(tmp_path) as (env, note_pids):
        p = _script(tmp_path, "killed_head.py", KILLED_HEAD_SCRIPT, env=env, timeout=300)
        note_pids()
        out = p.stdout + p.stderr
        print(out)
        assert p.returncode == 0, out
        lines = out.splitlines()
        killed = next(line.split()[1] for line in lines if line.startswith("KILLED"))
        assert f"raynb: the local cluster's head (pid {killed}) is gone; starting a new one" in out, out
        next_fit = next(line.split() for line in lines if line.startswith("NEXT_FIT_S"))
        assert next_fit[2] == "FINISHED", out
        follow = next(line.split() for line in lines if line.startswith("FOLLOW_FAILED_S"))
        assert float(follow[1]) < 4.0, out  # PING_EVERY_S of quiet, then the pid is checked
        assert out.count("is gone; starting a new one") == 2 and "AGAIN FINISHED" in out, out
        old = [int(pid) for line in lines if line.startswith("OLD") for pid in line.split()[1:]]
        deadline = time.monotonic() + 10
        while alive(old) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(old), f"processes of the killed clusters left: {alive(old)}"
