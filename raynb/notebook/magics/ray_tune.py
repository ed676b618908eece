"""``%%ray_tune``: the cell body is a Tune trainable, ``config`` its trial's sampled values.

::

    %%ray_tune --samples 16 --metric val_loss --mode min --scheduler asha --space {"lr": loguniform(1e-4, .1)}
    for epoch in range(20):
        report({"val_loss": train_one_epoch(config["lr"])})

The cell becomes ``f(config)`` as for ``%%ray_train`` (``cellfunc``: the
traceback of a failing trial shows the cell's own line numbers), and runs under
``Tuner(f, param_space=space, tune_config=TuneConfig(...), run_config=RunConfig(...)).fit()``.
With ``--workers-per-trial N`` (N > 1) each trial is a ``TorchTrainer`` DDP run
on N ranks, its ``train_loop_config`` the sampled values. ``--space`` is Python,
evaluated in the notebook's namespace with the search-space functions
(``uniform``, ``loguniform``, ``choice``, ``randint``, ``grid_search``, ...)
available without imports. Bad options are a ``UsageError`` before any trial starts.
"""

from __future__ import annotations

import linecache
import sys

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class

from ...errors import TuneInterrupted
from ...tune.search import sample as _sample
from .arguments import MagicParser, positive_int, split_expression
from .cell_function import build_cell_function

# The search-space functions usable in --space without imports (they win over
# notebook names: `from random import choice` must not turn a space into one draw).
SPACE_API = {
    name: getattr(_sample, name)
    for name in (
        "uniform",
        "quniform",
        "loguniform",
        "qloguniform",
        "randint",
        "qrandint",
        "lograndint",
        "qlograndint",
        "randn",
        "qrandn",
        "choice",
        "grid_search",
        "sample_from",
    )
}

SCHEDULERS = ("fifo", "asha", "hyperband", "median", "pbt")
SEARCHES = ("random", "optuna")


def _positive_float(text: str) -> float:
    import argparse

    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return x


def _add_search_options(p: MagicParser) -> None:
    """What is searched and how: samples, metric and mode, scheduler, search, space."""
    p.add_argument(
        "--samples",
        "--num-samples",
        dest="samples",
        type=positive_int,
        default=1,
        help="trials to sample (each grid point is repeated this many times)",
    )
    p.add_argument("--metric", default=None, help="reported metric to optimise")
    p.add_argument("--mode", default=None, choices=["min", "max"], help="minimise or maximise --metric")
    p.add_argument(
        "--scheduler",
        default="fifo",
        choices=SCHEDULERS,
        help="trial scheduler (early stopping / PBT); default fifo",
    )
    p.add_argument(
        "--search",
        default="random",
        choices=SEARCHES,
        help="search algorithm: random/grid, or optuna (TPE); default random",
    )
    p.add_argument(
        "--space",
        default=None,
        help="search space: a Python dict expression, e.g. {'lr': loguniform(1e-4, 1e-1)}",
    )


def _add_trial_options(p: MagicParser) -> None:
    """Each trial's resources, the experiment's limits, and the schedulers' settings."""
    p.add_argument(
        "--workers-per-trial",
        type=positive_int,
        default=1,
        help="ranks per trial; > 1 makes each trial a TorchTrainer DDP run",
    )
    p.add_argument("--gpu", action="store_true", help="one GPU per rank")
    p.add_argument("--max-concurrent", type=positive_int, default=None, help="most trials running at once")
    p.add_argument(
        "--time-budget",
        type=_positive_float,
        default=None,
        help="seconds after which no new trial starts and running ones stop",
    )
    p.add_argument(
        "--max-t",
        type=positive_int,
        default=None,
        help="asha/hyperband: most training_iterations per trial (defaults 100 / 81)",
    )
    p.add_argument(
        "--grace-period",
        type=positive_int,
        default=None,
        help="asha/median: iterations before a trial may be stopped (default 1)",
    )
    p.add_argument(
        "--perturbation-interval",
        type=positive_int,
        default=4,
        help="pbt: iterations between exploit/explore steps (default 4)",
    )
    p.add_argument("--seed", type=int, default=None, help="seed of the search algorithm (and PBT)")


def tune_parser() -> MagicParser:
    """The ``%%ray_tune`` options (argparse; errors raise IPython's UsageError)."""
    p = MagicParser(
        prog="%%ray_tune",
        description="Tune the cell body: each trial runs it with "
        "`config` holding that trial's sampled values, on the warm workers.",
    )
    _add_search_options(p)
    _add_trial_options(p)
    p.add_argument("--name", default=None, help="experiment name (its directory name)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the experiment --name NAME: the cell is its trainable (give the "
        "same --workers-per-trial and --gpu); space, search and scheduler are its own",
    )
    p.add_argument("--storage-path", default=None, help="parent directory of the experiment directory")
    p.add_argument(
        "--result",
        default=None,
        help="notebook name bound to the ResultGrid (default: the cell's output, `_`; "
        "after an interrupt, `_ray_tune_result`)",
    )
    p.add_argument("--quiet", action="store_true", help="no trial table")
    return p


def parse_line(line: str):
    """The parsed options of a ``%%ray_tune`` line.

    Raises:
        UsageError: unknown option or value, or options that do not go together."""
    rest, space = split_expression(line, "--space", strict=True)
    args = tune_parser().parse_line(rest)
    if space is not None:
        args.space = space
    if args.result is not None and not args.result.isidentifier():
        raise UsageError(f"--result {args.result!r} is not a valid Python name")
    if (args.metric is None) != (args.mode is None):
        raise UsageError(
            "--metric and --mode go together: name the reported metric and whether "
            "to minimise or maximise it, e.g. --metric val_loss --mode min"
        )
    needs = [f"--scheduler {args.scheduler}"] if args.scheduler != "fifo" else []
    needs += ["--search optuna"] if args.search == "optuna" else []
    if needs and args.metric is None:
        raise UsageError(
            f"{' and '.join(needs)} need{'s' if len(needs) == 1 else ''} a metric: "
            "add --metric NAME --mode min|max"
        )
    if args.resume and not args.name:
        raise UsageError(
            "--resume continues an experiment by name: add --name NAME (raynb.runs() lists the experiments)"
        )
    if args.max_t is not None and args.scheduler not in ("asha", "hyperband"):
        raise UsageError(f"--max-t applies to --scheduler asha or hyperband, not {args.scheduler}")
    if args.grace_period is not None and args.scheduler not in ("asha", "median"):
        raise UsageError(f"--grace-period applies to --scheduler asha or median, not {args.scheduler}")
    return args


def eval_space(expr: str | None, user_ns: dict) -> dict:
    """``--space EXPR`` evaluated in the notebook's namespace plus `SPACE_API`.

    Raises:
        UsageError: it fails to evaluate (naming the exception) or is not a dict."""
    if expr is None:
        return {}
    ns = dict(user_ns)
    ns.update(SPACE_API)
    try:
        space = eval(expr, ns)  # noqa: S307 - the user's own expression, in their own kernel
    except Exception as e:
        raise UsageError(f"--space {expr!r} failed to evaluate: {type(e).__name__}: {e}") from None
    if not isinstance(space, dict):
        raise UsageError(
            f"--space must be a dict of hyperparameters, e.g. {{'lr': loguniform(1e-4, 1e-1)}}; "
            f"got {type(space).__name__}: {space!r}"
        )
    return space


def _mutations(space: dict) -> dict:
    """PBT's hyperparam_mutations: the space's sampled entries (grid and constant values left out)."""
    out = {}
    for k, v in space.items():
        if isinstance(v, dict) and "grid_search" not in v:
            sub = _mutations(v)
            if sub:
                out[k] = sub
        elif isinstance(v, _sample.Domain) and not isinstance(v, _sample.Function):
            out[k] = v
    return out


def make_scheduler(args, space: dict):
    """The scheduler object for ``--scheduler`` (metric and mode come from TuneConfig),
    with ``training_iteration`` (one per ``report``) as the time unit."""
    from ...tune import schedulers

    if args.scheduler == "fifo":
        return None
    if args.scheduler == "asha":
        return schedulers.ASHAScheduler(
            time_attr="training_iteration", max_t=args.max_t or 100, grace_period=args.grace_period or 1
        )
    if args.scheduler == "hyperband":
        return schedulers.HyperBandScheduler(time_attr="training_iteration", max_t=args.max_t or 81)
    if args.scheduler == "median":
        return schedulers.MedianStoppingRule(
            time_attr="training_iteration", grace_period=args.grace_period or 1
        )
    mutations = _mutations(space)
    if not mutations:
        raise UsageError(
            "--scheduler pbt mutates the sampled hyperparameters of --space, and there are "
            "none: give --space entries such as {'lr': loguniform(1e-4, 1e-1)}"
        )
    return schedulers.PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=args.perturbation_interval,
        hyperparam_mutations=mutations,
        seed=args.seed,
    )


def make_search(args):
    """The search algorithm for ``--search`` (None: the Tuner's default random/grid search)."""
    from ...tune import search

    if args.search == "optuna":
        try:
            return search.OptunaSearch(seed=args.seed)
        except ImportError as e:
            raise UsageError(f"--search optuna needs the optuna library ({e}); pip install optuna") from None
    if args.seed is not None:
        return search.BasicVariantGenerator(random_state=args.seed)
    return None


@magics_class
class RayTuneMagics(Magics):
    @cell_magic
    def ray_tune(self, line: str, cell: str):
        """%%ray_tune [--samples N] [--metric NAME --mode min|max]
        [--scheduler fifo|asha|hyperband|median|pbt] [--search random|optuna] [--space EXPR]
        [--workers-per-trial N] [--max-concurrent N] [--result NAME] [--name NAME [--resume]]:
        tune the cell body (``config`` holds each trial's sampled values)."""
        args = parse_line(line)
        ns = self.shell.user_ns
        space = eval_space(args.space, ns)
        scheduler = make_scheduler(args, space)
        search_alg = make_search(args)
        count = self.shell.displayhook.prompt_count  # the cell's In [n] (see %%ray_train)
        filename = f"<ray_tune cell {count}>"
        cf = build_cell_function(
            cell, ns, magic_line=f"%%ray_tune {line}", filename=filename, func_name="ray_tune_cell"
        )
        # In linecache, the cell's source ships with every trial (shipping.notebook_sources),
        # so a trial's traceback shows the cell's lines.
        linecache.cache[filename] = (len(cf.source), None, cf.source.splitlines(True), filename)
        trainable, param_space = _trainable(cf.fn, args, space)
        path = _experiment_path(args)
        tuner = _make_tuner(args, path, trainable, param_space, scheduler, search_alg)
        tuner._carry_on = "re-run this cell with --name {name} --resume"
        bound = args.result or "_ray_tune_result"
        tuner._results_at = f"`{bound}`"
        try:
            grid = tuner.fit()
        except TuneInterrupted as e:  # the stop button: Run All stops here, the grid so far is kept
            ns[bound] = e.result_grid
            raise
        _print_errors(grid)
        if args.result is not None:
            ns[args.result] = grid
            return None
        return grid  # shown as the cell's output; `_` holds it


def _trainable(fn, args, space: dict) -> tuple:
    """(trainable, param_space): the cell's function, or a TorchTrainer of it for more
    than one rank or a GPU per trial (its config under ``train_loop_config``)."""
    from ...train.config import ScalingConfig

    if args.workers_per_trial > 1 or args.gpu:
        from ...train.torch import TorchTrainer

        trainable = TorchTrainer(
            fn, scaling_config=ScalingConfig(num_workers=args.workers_per_trial, use_gpu=args.gpu)
        )
        param_space = {"train_loop_config": space}
    else:
        trainable, param_space = fn, space
    return trainable, param_space


def _experiment_path(args):
    """The experiment's directory (None without --name). Raises UsageError for a
    --resume of an experiment that is not there, or a new one whose name is taken."""
    from ...tune import Tuner
    from ...tune.experiment_state import experiment_dir

    try:
        path = experiment_dir(args.name, args.storage_path) if args.name else None
    except ValueError as e:  # an object store's URI
        raise UsageError(f"%%ray_tune --storage-path: {e}") from None
    exists = path is not None and Tuner.can_restore(str(path))
    if args.resume and not exists:
        raise UsageError(
            f"no experiment named {args.name!r} in {path.parent} to resume: drop --resume to start it"
        )
    if exists and not args.resume:  # as %%ray_train refuses a run's name: nothing is overwritten
        raise UsageError(
            f"an experiment named {args.name!r} already exists in {path.parent}: add "
            "--resume to continue it (its unfinished trials resume from their "
            "checkpoints), or choose another --name"
        )
    return path


def _make_tuner(args, path, trainable, param_space: dict, scheduler, search_alg):
    """The Tuner of the line's options, or the one --resume restores from ``path``.
    Raises UsageError for a bad space or a resume line that does not match."""
    from ...train.config import RunConfig
    from ...tune import TuneConfig, Tuner

    try:
        if args.resume:  # as Tuner.restore(path, trainable): the experiment's own settings
            _check_resume_line(path, args)
            tuner = Tuner.restore(str(path), trainable)
        else:
            tuner = Tuner(
                trainable,
                param_space=param_space,
                tune_config=TuneConfig(
                    metric=args.metric,
                    mode=args.mode,
                    num_samples=args.samples,
                    max_concurrent_trials=args.max_concurrent,
                    scheduler=scheduler,
                    search_alg=search_alg,
                    time_budget_s=args.time_budget,
                ),
                run_config=RunConfig(
                    name=args.name, storage_path=args.storage_path, verbose=0 if args.quiet else 1
                ),
            )
    except (ValueError, TypeError) as e:  # a bad space (empty choice, lower >= upper) names its key
        raise UsageError(f"%%ray_tune: {e}") from None
    return tuner


def _check_resume_line(path, args) -> None:
    """The line must ask for the ranks and GPUs per trial the experiment ran with: they are
    the cell's trainable, not a setting stored with the experiment.

    Raises:
        UsageError: they differ, naming the options to give."""
    from ...tune.experiment_state import read_state

    header, _ = read_state(str(path))
    ran = header.get("num_workers"), bool(header.get("use_gpu"))
    if ran[0] is not None and ran != (args.workers_per_trial, args.gpu):
        options = f"--workers-per-trial {ran[0]}" + (" --gpu" if ran[1] else "")
        raise UsageError(
            f"experiment {args.name!r} ran each trial on {ran[0]} worker(s)"
            f"{' with a GPU each' if ran[1] else ''}: resume it with {options} on the line "
            "(its checkpoints are those ranks'); its space, search and scheduler are its own"
        )


def _print_errors(grid) -> None:
    """The first failed trial's traceback (with the cell's line numbers), and how many failed."""
    errors = list(getattr(grid, "errors", None) or [])
    if not errors:
        return
    err = errors[0]
    render = getattr(err, "_render_traceback_", None)
    text = "\n".join(render()) if callable(render) else f"{type(err).__name__}: {err}"
    n = len(errors)
    sys.stderr.write(f"{n} trial{'s' if n != 1 else ''} failed; the first one's error:\n{text}\n")
    sys.stderr.flush()


__all__ = [
    "RayTuneMagics",
    "tune_parser",
    "parse_line",
    "eval_space",
    "make_scheduler",
    "make_search",
    "SPACE_API",
]
