"""``%%ray_tune`` in a real IPython shell, on the real session cluster."""

from __future__ import annotations

import os
import re

import pytest
from conftest import ok_cell as ok
from conftest import run_cell as run
from IPython.core.error import UsageError


def run_ids(cluster) -> set:
    """The ids of the runs the head lists (its newest, up to its archive limit): a set
    difference counts new runs where a length would stop growing at the limit."""
    return {r["run_id"] for r in cluster.status()["runs"]}


# A synthetic objective with a known optimum: loss = (x - 0.3)^2 + 1/iteration.
QUADRATIC = """%%ray_tune --samples 4 --metric loss --mode min --seed 3 --space {{'x': uniform(-1, 1), 'c': choice([5]), 'nested': {{'k': 7}}}} {opts}
for i in range(1, 4):
    report({{"loss": (config["x"] - 0.3) ** 2 + 1.0 / i, "c": config["c"], "k": config["nested"]["k"]}})
"""


def test_tune_cell_runs_trials_and_shows_the_table(ip, cluster):
    ok(ip, "from random import choice")  # the space's choice() wins over the notebook's
    before = run_ids(cluster)
    res, cap = ok(ip, QUADRATIC.format(opts=""))
    grid = res.result  # the cell's output, as `_`
    assert grid is not None and ip.user_ns["_"] is grid
    assert len(grid) == 4 and grid.num_errors == 0 and grid.num_terminated == 4
    assert len(run_ids(cluster) - before) == 4  # one run per trial
    xs = []
    for i in range(4):
        r = grid[i]
        x = r.config["x"]
        assert -1 <= x < 1 and r.config["c"] == 5 and r.config["nested"] == {"k": 7}
        assert r.metrics["training_iteration"] == 3 and r.metrics["k"] == 7
        assert r.metrics["loss"] == pytest.approx((x - 0.3) ** 2 + 1 / 3)
        xs.append(x)
    assert len(set(xs)) == 4
    best = grid.get_best_result()
    assert best.config["x"] == min(xs, key=lambda x: (x - 0.3) ** 2)
    df = grid.get_dataframe()
    assert len(df) == 4 and "config/x" in df.columns
    # The text table: printed while tuning and once at the end, best trial starred.
    out = cap.stdout
    assert "== Tune finished: 4 trials: 4 TERMINATED" in out, out
    final = out.split("== Tune finished:")[1]
    header, *rows = final.splitlines()[1:6]
    assert header.split()[:4] == ["trial_id", "status", "x", "c"]
    best_row = next(row for row in rows if row.startswith("*"))
    assert f"{best.metrics['loss']:.4g}" in best_row
    assert sum(row.startswith("*") for row in rows) == 1

    # The same space and seed sample the same configs; --result stores, shows no output.
    ip.user_ns.pop("tuned", None)
    res, cap = ok(ip, QUADRATIC.format(opts="--result tuned --quiet --name quad_again"))
    assert res.result is None
    tuned = ip.user_ns["tuned"]
    assert sorted(r.config["x"] for r in tuned) == sorted(xs)
    assert "== Tune" not in cap.stdout  # --quiet: no table
    assert os.path.basename(tuned.experiment_path.rstrip("/")) == "quad_again"


FAILING = """%%ray_tune --metric loss --mode min --space {'x': grid_search([1, -1])} --result failed
y = config["x"]
assert y > 0, f"negative x={y}"
report({"loss": y})
"""


def test_failing_trial_is_an_error_row_and_its_traceback_shows_the_cell_line(ip):
    res, cap = ok(ip, FAILING)  # other trials finish; the cell itself does not raise
    grid = ip.user_ns["failed"]
    assert len(grid) == 2 and grid.num_errors == 1 and grid.num_terminated == 1
    count = res.execution_count
    err = cap.stderr
    assert "1 trial failed" in err
    assert re.search(rf'File "<ray_tune cell {count}>", line 3, in ', err), err
    assert "AssertionError: negative x=-1" in err
    final = cap.stdout.split("== Tune finished:")[1]
    assert re.search(r"\n\s+\S+\s+ERROR\s+-1\s", final), final
    assert "AssertionError: negative x=-1" in final


def test_asha_stops_bad_trials_early(ip):
    cell = (
        "%%ray_tune --samples 8 --metric loss --mode min --scheduler asha --max-t 8 --seed 1 "
        "--max-concurrent 2 --result asha --space {'x': uniform(-1, 1)}\n"
        "for i in range(1, 9):\n"
        "    report({'loss': (config['x'] - 0.3) ** 2 + 1.0 / i})\n"
    )
    res, cap = ok(ip, cell)
    grid = ip.user_ns["asha"]
    its = sorted(r.metrics["training_iteration"] for r in grid)
    assert len(grid) == 8 and grid.num_errors == 0
    assert its[0] < 8 and its[-1] == 8, its  # some trials stopped early, the best ran to max_t
    final = cap.stdout.split("== Tune finished:")[1]
    assert "TERMINATED" in final.splitlines()[0]


def test_workers_per_trial_runs_each_trial_as_ddp(ip):
    cell = (
        "%%ray_tune --samples 2 --metric loss --mode max --workers-per-trial 2 --quiet --result ddp "
        "--space {'a': randint(1, 100)}\n"
        "world = get_context().get_world_size()\n"
        "report({'loss': float(config['a']), 'world': world})\n"
    )
    ok(ip, cell)
    grid = ip.user_ns["ddp"]
    assert len(grid) == 2 and grid.num_errors == 0
    for r in grid:
        assert r.metrics["world"] == 2
        assert 1 <= r.metrics["loss"] < 100


@pytest.mark.parametrize(
    "line,why",
    [
        ("--scheduler bogus", "argument --scheduler: invalid choice: 'bogus'"),
        ("--search bayes", "argument --search: invalid choice: 'bayes'"),
        ("--metric loss --mode median", "argument --mode: invalid choice: 'median'"),
        ("--samples 0", "positive integer"),
        ("--workers-per-trial x", "positive integer"),
        ("--bogus", "unrecognized arguments: --bogus"),
    ],
)
def test_bad_options_print_usage(ip, cluster, line, why):
    before = run_ids(cluster)
    with pytest.raises(UsageError) as ei:
        ip.run_cell_magic("ray_tune", line, "report({'loss': 1})\n")
    assert "usage: %%ray_tune" in str(ei.value) and why in str(ei.value)
    res, cap = run(ip, f"%%ray_tune {line}\nreport({{'loss': 1}})\n")
    assert isinstance(res.error_in_exec, UsageError)
    assert "usage: %%ray_tune" in cap.stdout + cap.stderr
    assert run_ids(cluster) == before


@pytest.mark.parametrize(
    "line,why",
    [
        ("--mode min", "--metric and --mode go together"),
        ("--metric loss", "--metric and --mode go together"),
        ("--scheduler asha", "--scheduler asha needs a metric: add --metric NAME --mode min|max"),
        ("--search optuna", "--search optuna needs a metric"),
        ("--scheduler hyperband --search optuna", "--scheduler hyperband and --search optuna need a metric"),
        ("--metric l --mode min --max-t 5", "--max-t applies to --scheduler asha or hyperband, not fifo"),
        ("--result 1bad", "--result '1bad' is not a valid Python name"),
        ("--space {'a': 1", "--space \"{'a': 1\" failed to evaluate: SyntaxError: '{' was never closed"),
        ("--space [uniform(0, 1)]", "--space must be a dict of hyperparameters"),
        ("--space {'a': no_such_name}", "NameError: name 'no_such_name' is not defined"),
        ("--space {'lr': uniform(1, 0)}", "param_space key 'lr': uniform(1, 0): lower must be < upper"),
        (
            "--space {'m': {'c': choice([])}}",
            "param_space key 'm/c': choice([]): the list of categories is empty",
        ),
        (
            "--metric l --mode min --scheduler pbt --space {'a': 1, 'b': grid_search([1, 2])}",
            "--scheduler pbt mutates the sampled hyperparameters of --space, and there are none",
        ),
    ],
)
def test_bad_combinations_are_usage_errors_before_any_trial(ip, cluster, line, why):
    before = run_ids(cluster)
    with pytest.raises(UsageError) as ei:
        ip.run_cell_magic("ray_tune", line, "report({'loss': 1})\n")
    assert why in str(ei.value)
    assert run_ids(cluster) == before


def test_help_lists_the_options(ip):
    with pytest.raises(UsageError) as ei:
        ip.run_cell_magic("ray_tune", "--help", "x = 1\n")
    text = str(ei.value)
    for opt in (
        "--samples",
        "--metric",
        "--mode",
        "--scheduler",
        "--search",
        "--space",
        "--workers-per-trial",
        "--max-concurrent",
        "--result",
        "--name",
    ):
        assert opt in text
    assert "asha" in text and "optuna" in text


def test_widget_view_leaves_the_static_table_in_the_output(ip, monkeypatch):
    """With the ipywidgets pane (as in Jupyter), the cell's last output is the static
    HTML summary: every trial's row, the best one starred, the plot inline."""
    monkeypatch.setenv("RAYNB_PROGRESS", "widget")
    cell = (
        "%%ray_tune --samples 3 --metric acc --mode max --seed 5 --result widgeted "
        "--space {'w': randint(0, 1000)}\n"
        "for i in range(1, 3):\n"
        "    report({'acc': config['w'] * i})\n"
    )
    res, cap = ok(ip, cell)
    grid = ip.user_ns["widgeted"]
    htmls = [o.data["text/html"] for o in cap.outputs if "text/html" in o.data]
    assert htmls, [o.data.keys() for o in cap.outputs]
    summary = htmls[-1]
    assert 'class="raynb-tune-summary"' in summary and "3 TERMINATED" in summary
    for r in grid:
        assert f">{r.trial_id}<" in summary
    best = grid.get_best_result()
    assert f"<b>{best.trial_id}</b>" in summary and summary.count("&#9733;") == 1
    assert "data:image/png;base64," in summary
    assert "== Tune" not in cap.stdout  # no text table alongside the widget


def test_pbt_mutates_the_sampled_entries_of_the_space(ip):
    from raynb.notebook.magics.ray_tune import _mutations, eval_space, make_scheduler, parse_line
    from raynb.tune import schedulers

    space = eval_space(
        "{'lr': loguniform(1e-3, 1), 'const': 3, 'g': grid_search([1, 2]), "
        "'opt': {'mom': uniform(0, 1), 'fixed': 'sgd'}, 'derived': sample_from(lambda s: 1)}",
        {},
    )
    assert _mutations(space) == {"lr": space["lr"], "opt": {"mom": space["opt"]["mom"]}}
    args = parse_line("--metric loss --mode min --scheduler pbt --perturbation-interval 2 --seed 0")
    assert isinstance(make_scheduler(args, space), schedulers.PopulationBasedTraining)
    # End to end without checkpoints: PBT skips exploits (no donor checkpoint) and trials finish.
    cell = (
        "%%ray_tune --samples 4 --metric loss --mode min --scheduler pbt --perturbation-interval 2 "
        "--seed 0 --quiet --result pbt --space {'lr': loguniform(1e-3, 1)}\n"
        "for i in range(1, 5):\n"
        "    report({'loss': config['lr'] / i})\n"
    )
    ok(ip, cell)
    grid = ip.user_ns["pbt"]
    assert len(grid) == 4 and grid.num_errors == 0
    assert all(r.metrics["training_iteration"] == 4 for r in grid)


SLOW_TRIALS = """%%ray_tune --samples 2 --metric i --mode max --quiet --result slow --name {name} --space {{'a': uniform(0, 1)}} {opts}
import time
for i in range(1, 31):
    report({{"i": i, "a": config["a"]}})
    time.sleep(0.1)
"""


def test_an_interrupted_experiment_resumes_by_name_and_is_never_overwritten(ip, tmp_path):
    # The interrupt's advice was Tuner.restore(path, trainable), which a cell has no trainable
    # for, and re-running the cell started new trials in the same directory: the interrupted
    # ones could no longer be restored.
    import _thread
    import threading
    import uuid

    name = f"resumable_{uuid.uuid4().hex[:6]}"
    timer = threading.Timer(2.5, _thread.interrupt_main)  # as Ctrl-C / the stop button in the kernel
    timer.start()
    try:
        res, cap = run(ip, SLOW_TRIALS.format(name=name, opts=""))
    finally:
        timer.cancel()
    # The cell fails as an interrupted cell does (Run All stops), the grid so far kept.
    assert isinstance(res.error_in_exec, KeyboardInterrupt), res.error_in_exec
    assert "the results so far are in `slow`" in str(res.error_in_exec), res.error_in_exec
    first = ip.user_ns["slow"]
    assert first.interrupted and sorted(r.status for r in first) == ["PAUSED", "PAUSED"], cap.stderr
    assert f"re-run this cell with --name {name} --resume" in cap.stderr, cap.stderr
    ids = sorted(r.trial_id for r in first)

    res, cap = run(ip, SLOW_TRIALS.format(name=name, opts=""))  # the same cell again: refused
    assert isinstance(res.error_in_exec, UsageError), res.error_in_exec
    assert f"an experiment named {name!r} already exists" in str(res.error_in_exec)
    assert "add --resume to continue it" in str(res.error_in_exec)
    # Other ranks per trial than the experiment ran: refused, naming the option, and nothing lost.
    res, cap = run(ip, SLOW_TRIALS.format(name=name, opts="--resume --workers-per-trial 2"))
    assert isinstance(res.error_in_exec, UsageError), res.error_in_exec
    assert (
        f"experiment {name!r} ran each trial on 1 worker(s): resume it with --workers-per-trial 1 on the line"
    ) in str(res.error_in_exec), res.error_in_exec

    ok(ip, SLOW_TRIALS.format(name=name, opts="--resume"))
    resumed = ip.user_ns["slow"]
    assert not resumed.interrupted and resumed.num_terminated == 2 and resumed.num_errors == 0
    assert sorted(r.trial_id for r in resumed) == ids  # the same trials, carried on
    assert all(r.metrics["i"] == 30 for r in resumed)

    with pytest.raises(UsageError, match="no experiment named 'nothing_here_" + name):
        ip.run_cell_magic(
            "ray_tune", f"--metric i --mode max --name nothing_here_{name} --resume", "report({'i': 1})\n"
        )
    with pytest.raises(UsageError, match="--resume continues an experiment by name: add --name NAME"):
        ip.run_cell_magic("ray_tune", "--metric i --mode max --resume", "report({'i': 1})\n")
