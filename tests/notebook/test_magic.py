"""``%%ray_train`` and ``%ray_cluster`` in a real IPython shell, on the real cluster."""

from __future__ import annotations

import os
import re

import pytest
from conftest import ok_cell
from conftest import run_cell as run
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

import raynb
from raynb.train.config import Result


def ok(shell, cell: str):
    return ok_cell(shell, cell)[1]


def run_ids(cluster) -> set:
    """The ids of the runs the head lists (its newest, up to its archive limit): a set
    difference counts new runs where a length would stop growing at the limit."""
    return {r["run_id"] for r in cluster.status()["runs"]}


NOTEBOOK_DEFS = """
import torch
from torch import nn

torch.manual_seed(0)
X = torch.randn(64, 3)
Y = X @ torch.tensor([[1.0], [-2.0], [0.5]])
dataset = torch.utils.data.TensorDataset(X, Y)

class Net(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, 1)

    def forward(self, x):
        return self.lin(x)

def mse(pred, target):
    return ((pred - target) ** 2).mean()
"""

TRAIN_CELL = """%%ray_train --workers 4 --out losses,state,world,in_sync --config {'epochs': 2}
ctx = get_context()
net = Net(3)
model = prepare_model(net)
loader = torch.utils.data.DataLoader(dataset, batch_size=8)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
losses = []
for epoch in range(config["epochs"]):
    total = 0.0
    for xb, yb in loader:
        opt.zero_grad()
        loss = mse(model(xb), yb)
        loss.backward()
        opt.step()
        total += loss.item()
    losses.append(total)
    report({"epoch": epoch, "loss": total})
world = ctx.get_world_size()
w = net.lin.weight.detach().clone()
gathered = [torch.zeros_like(w) for _ in range(world)]
torch.distributed.all_gather(gathered, w)
in_sync = all(torch.equal(gathered[0], g) for g in gathered)
if ctx.get_world_rank() == 0:
    state = {k: v.detach().clone() for k, v in net.state_dict().items()}
"""


def test_ray_train_cell_reads_notebook_and_returns_out_names(ip, cluster):
    ok(ip, NOTEBOOK_DEFS)
    ns = ip.user_ns
    for name in ("losses", "state", "world", "in_sync", "_ray_result"):
        ns.pop(name, None)
    cap = ok(ip, TRAIN_CELL)
    assert isinstance(ns["losses"], list) and len(ns["losses"]) == 2
    assert all(isinstance(v, float) and v > 0 for v in ns["losses"])
    assert ns["world"] == 4
    assert ns["in_sync"] is True, "DDP replicas diverged: prepare_model did not wrap the model"
    state = ns["state"]
    assert set(state) == {"lin.weight", "lin.bias"}
    assert tuple(state["lin.weight"].shape) == (1, 3)
    # Only the --out names come back; the cell's other locals stay on the workers.
    for local in ("net", "model", "opt", "ctx", "loader", "gathered"):
        assert local not in ns
    result = ns["_ray_result"]
    assert isinstance(result, Result)
    assert result.state == "FINISHED" and result.error is None
    assert result.metrics["epoch"] == 1 and result.metrics["training_iteration"] == 2
    assert result.metrics["loss"] == ns["losses"][-1]
    assert list(result.metrics_dataframe["epoch"]) == [0, 1]
    assert result.config == {"epochs": 2}
    assert os.path.isdir(result.path)
    assert "FINISHED" in cap.stdout  # the text progress view was shown

    # --result NAME, and --config referring to a notebook variable.
    ok(ip, "cfg = {'epochs': 1}")
    ok(ip, TRAIN_CELL.replace("--config {'epochs': 2}", "--config cfg --result res --quiet"))
    assert len(ns["losses"]) == 1
    assert isinstance(ns["res"], Result) and ns["res"].metrics["training_iteration"] == 1
    assert ns["_ray_result"] is result


def test_config_expression_forms(ip):
    cell = "%%ray_train --workers 1 --quiet --out got {opts}\ngot = config\n"
    for opts, expected in [
        ("--config {'a': 1, 'b': [1, 2]} --name cfg_forms_1", {"a": 1, "b": [1, 2]}),
        ("--config={'lr':0.1}", {"lr": 0.1}),
        ("--config \"{'a': 'x y'}\"", {"a": "x y"}),
        ("--config dict(a=-1, b = 2)", {"a": -1, "b": 2}),
    ]:
        ip.user_ns.pop("got", None)
        ok(ip, cell.format(opts=opts))
        assert ip.user_ns["got"] == expected, opts
        if "--name" in opts:  # the option after the expression still applies
            assert ip.user_ns["_ray_result"].name == "cfg_forms_1"
    res, cap = run(ip, cell.format(opts="--config {'a': 1"))
    assert isinstance(res.error_in_exec, UsageError)


def test_redefined_notebook_function_runs_new_form(ip):
    cell = "%%ray_train --workers 2 --quiet --out y\ny = scale(get_context().get_world_rank() + 3)\n"
    ok(ip, "OFFSET = 0\ndef scale(x):\n    return x * 2 + OFFSET\n")
    ok(ip, cell)
    assert ip.user_ns["y"] == 6
    ok(ip, "def scale(x):\n    return x * 10 + OFFSET\n")
    ok(ip, cell)
    assert ip.user_ns["y"] == 30
    ok(ip, "OFFSET = 1000")  # a global the helper reads, changed between cells
    ok(ip, cell)
    assert ip.user_ns["y"] == 1030


def test_error_on_rank_1_shows_cell_line(ip):
    cell = (
        "%%ray_train --workers 2 --quiet\n"  # line 1
        "rank = get_context().get_world_rank()\n"  # line 2
        "x = 1\n"  # line 3
        "if rank == 1:\n"  # line 4
        "    raise ValueError(f'boom on rank {rank}')\n"  # line 5
        "y = 2\n"
    )
    res, cap = run(ip, cell)
    err = res.error_in_exec
    assert isinstance(err, raynb.RunError), repr(err)
    assert err.rank == 1 and [e["rank"] for e in err.errors] == [1]
    assert err.errors[0]["exc_type"] == "ValueError"
    rendered = "\n".join(err._render_traceback_())
    assert "rank 1" in rendered
    count = res.execution_count  # the cell's In [n]
    assert re.search(rf'File "<ray_train cell {count}>", line 5, in ', rendered), rendered
    assert "raise ValueError(f'boom on rank {rank}')" in rendered
    assert "ValueError: boom on rank 1" in rendered
    assert "raynb/worker.py" not in rendered, "raynb's own frames leak into the user's traceback"
    assert "boom on rank 1" in cap.stdout + cap.stderr  # what the notebook shows
    assert isinstance(ip.user_ns["_ray_result"], Result)
    assert ip.user_ns["_ray_result"].state == "FAILED"

    # Raised inside a helper defined in an earlier cell: that cell's line shows too.
    ok(ip, "def check(v):\n    if v == 1:\n        raise KeyError('helper failed')\n    return v\n")
    res, cap = run(ip, "%%ray_train --workers 2 --quiet\ncheck(get_context().get_world_rank())\n")
    err = res.error_in_exec
    assert isinstance(err, raynb.RunError) and err.rank == 1
    rendered = "\n".join(err._render_traceback_())
    assert "check(get_context().get_world_rank())" in rendered
    assert "raise KeyError('helper failed')" in rendered


def test_unpicklable_variable_named_and_nothing_submitted(ip, cluster, tmp_path):
    ok(
        ip,
        f"import threading\nlog_file = open({str(tmp_path / 'log.txt')!r}, 'w')\n"
        "lock = threading.Lock()\ngen = (i for i in range(3))\nfine = [1, 2]\n"
        "def helper():\n    with lock:\n        return 1\n",
    )
    before = run_ids(cluster)
    try:
        for body, name in [
            ("log_file.write('x')", "log_file"),
            ("with lock:\n    total = sum(fine)", "lock"),
            ("for g in gen:\n    pass", "gen"),
            ("z = helper() + fine[0]", "helper -> lock"),
        ]:
            res, cap = run(ip, f"%%ray_train --workers 2 --quiet\n{body}\n")
            err = res.error_in_exec
            assert isinstance(err, raynb.UnpicklableError), (body, repr(err))
            assert err.name == name
            assert repr(name) in str(err)
            assert run_ids(cluster) == before, f"a run was submitted for {name}"
    finally:
        ip.user_ns["log_file"].close()


@pytest.mark.parametrize(
    "line,why",
    [
        ("--workers 0", "positive integer"),
        ("--workers -2", "positive integer"),
        ("--workers abc", "positive integer"),
        ("--bogus", "unrecognized arguments: --bogus"),
        ("--workers", "expected one argument"),
        ('--name "unclosed', "closing quotation"),
        ("--worker 2", "unrecognized arguments: --worker 2"),  # a typo, not argparse's prefix of --workers
    ],
)
def test_bad_options_print_usage(ip, cluster, line, why):
    before = run_ids(cluster)
    with pytest.raises(UsageError) as ei:
        ip.run_cell_magic("ray_train", line, "x = 1\n")
    assert "usage: %%ray_train" in str(ei.value)
    assert why in str(ei.value)
    # Through run_cell, as a notebook shows it.
    res, cap = run(ip, f"%%ray_train {line}\nx = 1\n")
    assert isinstance(res.error_in_exec, UsageError)
    assert "usage: %%ray_train" in cap.stdout + cap.stderr
    assert run_ids(cluster) == before


def test_bad_out_and_config_are_usage_errors(ip, cluster):
    before = run_ids(cluster)
    with pytest.raises(UsageError, match="not a valid Python name"):
        ip.run_cell_magic("ray_train", "--out 1bad", "x = 1\n")
    with pytest.raises(UsageError, match="failed to evaluate"):
        ip.run_cell_magic("ray_train", "--config no_such_name_here", "x = 1\n")
    with pytest.raises(UsageError, match=r"--config must be a dict, the cell's `config` .* '5' is a int"):
        ip.run_cell_magic("ray_train", "--config 5", "x = 1\n")  # was run, its config an int
    res, cap = run(ip, "%%ray_train --help\nx = 1\n")
    assert isinstance(res.error_in_exec, UsageError)
    assert "usage: %%ray_train" in str(res.error_in_exec) and "--all-ranks" in str(res.error_in_exec)
    shown = cap.stdout + cap.stderr
    assert shown.count("usage: %%ray_train") == 1, shown  # the help once (it was printed, then raised)
    assert run_ids(cluster) == before


def test_ray_cluster_status_and_usage(ip, cluster):
    with capture_output() as cap:
        ip.run_line_magic("ray_cluster", "status")
    st = cluster.status()
    assert cluster.info["address"] in cap.stdout
    assert "rejected messages" in cap.stdout
    for w in st["workers"]:
        assert re.search(rf"{re.escape(w['worker_id'])}\s+{w['pid']}\s", cap.stdout), cap.stdout
    with capture_output() as cap:
        ip.run_line_magic("ray_cluster", "")  # status is the default
    assert st["workers"][0]["worker_id"] in cap.stdout
    with pytest.raises(UsageError) as ei:
        ip.run_line_magic("ray_cluster", "bogus")
    assert "usage: %ray_cluster" in str(ei.value)
    res, cap = run(ip, "%ray_cluster bogus")
    assert isinstance(res.error_in_exec, UsageError)
    assert cluster.ping()


PRINT_CELL = """%%ray_train --workers 2 --quiet {opts}
import sys
r = get_context().get_world_rank()
print(f"hello from {{r}}")
print("two\\nlines", r)
print(f"err {{r}}", file=sys.stderr)
print("no newline", r, end="")
"""


def test_print_output_tagged_by_rank(ip):
    cap = ok(ip, PRINT_CELL.format(opts=""))
    assert "(rank 0) hello from 0\n" in cap.stdout
    assert "(rank 0) two\n(rank 0) lines 0\n" in cap.stdout
    assert "(rank 0) no newline 0\n" in cap.stdout  # ended when the run ended
    assert "(rank 0) err 0\n" in cap.stderr
    assert "(rank 1)" not in cap.stdout + cap.stderr
    assert "err 0" not in cap.stdout

    cap = ok(ip, PRINT_CELL.format(opts="--all-ranks"))
    out, err = cap.stdout.splitlines(), cap.stderr.splitlines()
    for r in (0, 1):
        # Lines of different ranks may interleave, but each stays whole and tagged.
        for line in (f"hello from {r}", "two", f"lines {r}", f"no newline {r}"):
            assert f"(rank {r}) {line}" in out, cap.stdout
        assert f"(rank {r}) err {r}" in err
    assert all(re.match(r"\(rank [01]\) ", line) for line in out + err), cap.stdout + cap.stderr
    assert cap.stdout.endswith("\n")


def test_unfinished_lines_continue_without_a_second_tag(ip):
    cell = (
        "%%ray_train --workers {n} --quiet {opts}\n"
        "for _ in range(3):\n"
        "    print('.', end='', flush=True)\n"
        "print(' done')\n"
    )
    cap = ok(ip, cell.format(n=1, opts=""))
    assert cap.stdout == "(rank 0) ... done\n"
    cap = ok(ip, cell.format(n=2, opts="--all-ranks"))
    lines = cap.stdout.splitlines()
    assert all(re.fullmatch(r"\(rank [01]\) [. done]+", line) for line in lines), cap.stdout
    for r in (0, 1):
        mine = "".join(line.split(") ", 1)[1] for line in lines if line.startswith(f"(rank {r})"))
        assert mine == "... done"
