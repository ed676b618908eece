"""IPython magics: ``%%ray_train`` and ``%ray_cluster`` (loaded by ``%load_ext raynb``)."""

from __future__ import annotations

import argparse
import os

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from ...errors import RunError
from .arguments import MagicParser, positive_int, split_expression, workers_arg
from .cell_function import build_cell_function


def _train_parser() -> MagicParser:
    p = MagicParser(
        prog="%%ray_train",
        add_help=True,
        description="Run the cell body on N warm ranks (torch.distributed DDP).",
    )
    p.add_argument(
        "--workers",
        "-n",
        type=workers_arg,
        default=None,
        help="ranks (world size); MIN-MAX (e.g. 2-4) for an elastic run; default 4, or the resumed run's",
    )
    p.add_argument("--gpu", action="store_true", help="one GPU per rank, NCCL backend")
    p.add_argument("--config", default=None, help="expression evaluated in the notebook, bound to `config`")
    p.add_argument(
        "--data",
        default=None,
        metavar="NAME=EXPR,...",
        help="datasets for get_dataset_shard(NAME): raynb.data Datasets, arrays or DataFrames",
    )
    p.add_argument(
        "--epochs",
        type=positive_int,
        default=None,
        help="total epochs, for the progress bars (also config['epochs'] if unset)",
    )
    p.add_argument("--name", default=None, help="run name (its directory name)")
    p.add_argument("--storage-path", default=None, help="parent directory of the run directory")
    p.add_argument("--out", default="", help="comma-separated names rank 0 sends back to the notebook")
    p.add_argument("--result", default="_ray_result", help="notebook name bound to the Result")
    p.add_argument("--all-ranks", action="store_true", help="show every rank's output, not only rank 0's")
    p.add_argument("--timeout", type=float, default=None, help="collective timeout in seconds")
    p.add_argument("--quiet", action="store_true", help="no progress pane")
    p.add_argument(
        "--max-failures",
        type=_max_failures,
        default=None,
        help="restarts from the latest checkpoint after a failure (-1: unlimited)",
    )
    p.add_argument(
        "--keep", type=positive_int, default=None, metavar="N", help="keep only the N newest checkpoints"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run --name NAME from its latest checkpoint, in its directory",
    )
    p.add_argument(
        "--profile",
        nargs="?",
        const=True,
        default=None,
        type=_profile,
        metavar="WAIT,WARMUP,ACTIVE",
        help="torch.profiler on every rank over reports WAIT+WARMUP..+ACTIVE (default 1,1,3)",
    )
    return p


def _profile(text: str) -> dict:
    from ...train.profiling import parse_schedule

    try:
        return parse_schedule(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _bind_interrupted(ns: dict, name: str, path: str | None) -> None:
    """``ns[name]``: the interrupted run's Result, read from its directory, once the run has
    ended there (a second interrupt may leave before the head confirmed the cancel)."""
    from ...cluster.protocol.run_states import RUN_TERMINAL as TERMINAL
    from ...train.config import Result

    try:
        result = Result.from_path(path) if path else None
    except Exception:  # noqa: BLE001 - a remote head's directory, or none yet: nothing to bind
        return
    if result is not None and result.state in TERMINAL:
        ns[name] = result


def _resumed_record(storage_path: str | None, name: str) -> dict | None:
    """The run.json of the run ``%%ray_train --resume`` continues, or None if unreadable."""
    from ...cluster.storage.rundir import default_storage_path, read_run_dir

    try:
        return read_run_dir(
            os.path.join(os.path.expanduser(storage_path or default_storage_path()), name), with_reports=False
        )
    except (OSError, ValueError):
        return None


def _max_failures(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = None
    if n is None or n < -1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= -1 (-1 means unlimited)")
    return n


def _datasets(expr: str, ns: dict) -> dict:
    """``--data train=EXPR,val=EXPR`` evaluated in the notebook: name -> Dataset (numpy
    arrays or dicts of them, DataFrames and TensorDatasets are made into Datasets)."""
    from ... import data as rd
    from ...train.datasets import check_datasets

    try:
        given = eval(f"dict({expr})", ns)  # noqa: S307 - the user's own expression, in their kernel
    except Exception as e:
        raise UsageError(
            f"--data {expr!r} failed to evaluate: {type(e).__name__}: {e} (write --data train=EXPR,val=EXPR)"
        ) from None
    out = {}
    for name, value in given.items():
        kind = type(value).__name__
        if kind in ("ndarray", "dict"):
            value = rd.from_numpy(value)
        elif kind == "DataFrame":
            value = rd.from_pandas(value)
        elif kind == "TensorDataset":
            value = rd.from_torch(value)
        out[name] = value
    return check_datasets(out)


def _parse_train_line(line: str) -> argparse.Namespace:
    """The %%ray_train line's options; ``--config`` and ``--data`` may hold spaces.
    Raises UsageError for a bad option or a --resume without --name."""
    line_rest, config_expr = split_expression(line, "--config")
    line_rest, data_expr = split_expression(line_rest, "--data", call="dict")
    args = _train_parser().parse_line(line_rest)
    if config_expr is not None:
        args.config = config_expr
    if data_expr is not None:
        args.data = data_expr
    if args.resume and not args.name:
        raise UsageError("--resume continues a run by name: add --name NAME (raynb.runs() lists the runs)")
    return args


def _out_names(args: argparse.Namespace) -> list[str]:
    """The --out names; raises UsageError for one (or --result) that is no Python name."""
    out = [n.strip() for n in args.out.split(",") if n.strip()]
    for n in out + [args.result]:
        if not n.isidentifier():
            raise UsageError(f"{n!r} is not a valid Python name (in --out / --result)")
    return out


def _train_config(args: argparse.Namespace, ns: dict) -> dict:
    """--config evaluated in the notebook (a dict; {} when not given), with --epochs as
    its ``epochs`` unless set. Raises UsageError when it fails or is no dict."""
    config = {}
    if args.config:
        try:
            config = eval(args.config, ns)  # noqa: S307 - the user's own expression, in their kernel
        except Exception as e:
            raise UsageError(
                f"--config {args.config!r} failed to evaluate: {type(e).__name__}: {e}"
            ) from None
        if not isinstance(config, dict):
            raise UsageError(
                f"--config must be a dict, the cell's `config` (e.g. --config "
                f"{{'lr': 0.01}}); {args.config!r} is a {type(config).__name__}"
            )
    if args.epochs and isinstance(config, dict):
        config.setdefault("epochs", args.epochs)
    return config


def _run_settings(args: argparse.Namespace) -> tuple:
    """(workers, gpu, timeout, max_failures, elastic interval, checkpoint config): as
    given, and for --resume the resumed run's own where not given again."""
    from ...train.config import CheckpointConfig

    workers, gpu, timeout, max_failures = args.workers, args.gpu, args.timeout, args.max_failures
    interval: dict = {}  # a resumed elastic run's resize interval
    checkpoint_config = CheckpointConfig(num_to_keep=args.keep) if args.keep else None
    if args.resume:
        # As TorchTrainer.restore: the run's own world size, restarts and checkpoint settings
        # unless given again. (A bare --resume ran on the default 4 ranks, a sharded
        # checkpoint's 2 ranks notwithstanding, with no restarts and no pruning.) A run
        # that cannot be read is left to the head, which refuses it naming the file.
        rec = _resumed_record(args.storage_path, args.name)
        from ...train.elastic import elastic_interval, recorded_num_workers

        if rec is not None:
            interval = {} if workers else elastic_interval(rec)
            workers = workers or recorded_num_workers(rec)  # an elastic run's (min, max) again
            gpu = gpu or bool(rec.get("use_gpu"))
            timeout = timeout if timeout is not None else rec.get("timeout_s")
            max_failures = max_failures if max_failures is not None else rec.get("max_failures")
            if checkpoint_config is None and rec.get("checkpoint_config"):
                checkpoint_config = CheckpointConfig(**rec["checkpoint_config"])
    return workers, gpu, timeout, max_failures, interval, checkpoint_config


def _bind_out(ns: dict, out: list[str], ret: dict | None) -> None:
    """Bind what rank 0 sent back in the notebook; say which --out names it never assigned."""
    missing = [n for n in out if n not in (ret or {})]
    for n, v in (ret or {}).items():
        ns[n] = v
    if missing:
        print(f"--out: rank 0 never assigned {', '.join(missing)}; left unchanged in the notebook")


def _cluster_parser() -> MagicParser:
    p = MagicParser(prog="%ray_cluster", description="Start, inspect or stop the local raynb cluster.")
    p.add_argument("action", nargs="?", default="status", choices=["start", "status", "stop", "dashboard"])
    p.add_argument("--workers", "-n", type=positive_int, default=4)
    return p


@magics_class
class RayNBMagics(Magics):
    @cell_magic
    def ray_train(self, line: str, cell: str):
        """%%ray_train --workers 4 [--gpu] [--config EXPR] [--epochs N] [--name NAME]
        [--out NAMES] [--result NAME] [--all-ranks]: run the cell body on N ranks."""
        from ...train.config import FailureConfig, RunConfig, ScalingConfig
        from ...train.fit_run import execute_run

        args = _parse_train_line(line)
        ns = self.shell.user_ns
        out = _out_names(args)
        config = _train_config(args, ns)
        datasets = _datasets(args.data, ns) if args.data else None
        # The cell's In [n]: IPython 9 advances execution_count before the cell runs, 8 after.
        count = self.shell.displayhook.prompt_count
        filename = f"<ray_train cell {count}>"
        cf = build_cell_function(cell, ns, magic_line=f"%%ray_train {line}", out=out, filename=filename)
        import linecache

        linecache.cache[filename] = (len(cf.source), None, cf.source.splitlines(True), filename)
        workers, gpu, timeout, max_failures, interval, checkpoint_config = _run_settings(args)
        from ...train.datasets import with_datasets

        try:
            result, ret = execute_run(
                with_datasets(cf.fn, datasets),
                config,
                ScalingConfig(num_workers=workers or 4, use_gpu=gpu, timeout_s=timeout, **interval),
                RunConfig(
                    name=args.name,
                    storage_path=args.storage_path,
                    verbose=0 if args.quiet else 1,
                    checkpoint_config=checkpoint_config,
                    failure_config=FailureConfig(max_failures) if max_failures else None,
                    profile=args.profile,
                ),
                sources={filename: cf.source},
                captured=cf.captured,
                epochs=args.epochs,
                all_ranks=args.all_ranks,
                name_prefix="ray_train",
                extra={"resume": True} if args.resume else None,
            )
        except RunError as e:
            ns[args.result] = e.result
            raise
        except KeyboardInterrupt as e:  # cancelled: its Result (state CANCELLED), as after a failure
            _bind_interrupted(ns, args.result, getattr(e, "run_path", None))
            raise
        ns[args.result] = result
        _bind_out(ns, out, ret)

    @line_magic
    def ray_attach(self, line: str):
        """%ray_attach [NAME] [--result VAR]: follow a running run (started by another
        kernel, or before a restart) to its end with the live progress pane; without
        NAME, the newest active run."""
        from ...train.fit_run import attach

        p = MagicParser(prog="%ray_attach", description="Follow a run to its end.")
        p.add_argument("name", nargs="?", default=None)
        p.add_argument("--result", default="_ray_result", help="notebook name bound to the Result")
        p.add_argument("--all-ranks", action="store_true")
        args = p.parse_line(line)
        try:
            result = attach(args.name, all_ranks=args.all_ranks)
        except KeyError as e:
            raise UsageError(e.args[0]) from None
        self.shell.user_ns[args.result] = result
        if result.error is not None:
            print(f"run {result.name!r} {result.state}: {result.error}")

    @line_magic
    def ray_cluster(self, line: str):
        """%ray_cluster [start|status|stop|dashboard] [--workers N]"""
        from ...client.connection import connect, disconnect, get_client
        from ...client.status import format_status
        from ...cluster.launch.local import start_and_keep, stop_cluster

        args = _cluster_parser().parse_line(line)
        if args.action == "start":
            info, started = start_and_keep(num_workers=args.workers)
            connect()
            print(("started" if started else "already running") + f": {info['address']}")
        elif args.action == "dashboard":
            from ..dashboard.link import dashboard_message

            print(dashboard_message())
        elif args.action == "stop":
            disconnect()
            print("stopped" if stop_cluster() else "no cluster was running")
        else:
            client = get_client(connect_if_needed=False)
            if client is None:
                from ...cluster.launch.local import running_cluster

                if running_cluster() is None:
                    print("no cluster running; `%ray_cluster start` or run a %%ray_train cell")
                    return
                client = connect()
            print(format_status(client.status()))
