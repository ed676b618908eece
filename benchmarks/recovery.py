"""Recovery from a killed worker: time to resume, and what one failure costs a run. Prints one JSON object.

What is timed, on a private cluster of 4 workers (its own temporary ``RAYNB_HOME`` and
``RAYNB_STORAGE_PATH``, so a user's cluster is never touched):

- ``resume_s``: ``--kills`` runs (``FailureConfig(max_failures=1)``, a checkpoint every
  epoch of ``--epoch-ms`` ms); in each, once ``checkpoint_000002`` is committed, this
  process sends SIGKILL to rank 2's worker (its pid from ``raynb.cluster_status()``). Timed
  from the moment ``os.kill`` is called to the arrival, here at the client, of the first
  report of the restarted attempt (which resumed from the latest checkpoint and trained
  one epoch). ``resume_split_ms`` breaks the medians down.
- ``total_time_s``: the digits CNN of ``raynb demo`` (15 epochs, a checkpoint every
  epoch, 4 ranks), run ``--pairs`` times without a failure and ``--pairs`` times with
  rank 2 killed once ``checkpoint_000007`` is committed, alternating, so both sides see
  the same machine load. Wall time of ``fit()`` (submit -> Result), medians and their ratio;
  also, as for ``resume_s``, kill -> the restarted attempt's first report at the client
  (which here trained one epoch of the CNN with DDP after loading the checkpoint).
- ``torch_import_s``: ``python -c "import torch"`` wall time, median of 3: what a fresh
  worker process would spend before it could do anything.

Wall clocks of processes on this one machine are compared, which is fine here.
The cluster is always stopped at the end (``raynb stop``), and any process it left is
killed, whatever happened.

Usage::

    python -m benchmarks.recovery            # 12 kills, 5 pairs of digits runs (~1 min)
    python -m benchmarks.recovery --quick    # smoke test: 3 kills, 1 pair
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from functools import partial

from benchmarks._common import machine_info, private_cluster, quantile, raynb_cli  # noqa: E402

WORKERS = 4
KILL_RANK = 2
TARGET_RESUME_S = 1.0


# -- the training functions (shipped to the workers by value) --------------------------
def epochs_fn(config):
    """``epochs`` short epochs (an all-reduce, ``epoch_s`` of work, an all-reduce), each
    reported with a checkpoint from rank 0; resumes from ``get_checkpoint()``."""
    import json as _json
    import os as _os
    import tempfile as _tempfile
    import time as _time

    import torch
    import torch.distributed as dist

    from raynb.train import Checkpoint, get_checkpoint, get_context, report

    fn_start = _time.time()
    start = 0
    ckpt = get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            with open(_os.path.join(d, "state.json")) as f:
                start = _json.load(f)["epoch"] + 1
    rank = get_context().get_world_rank()
    for epoch in range(start, config["epochs"]):
        t = torch.ones(1)
        dist.all_reduce(t)
        _time.sleep(config["epoch_s"])
        dist.all_reduce(t)
        metrics = {"epoch": epoch, "start_epoch": start, "fn_start": fn_start, "reported_at": _time.time()}
        if rank == 0:
            with _tempfile.TemporaryDirectory() as d:
                with open(_os.path.join(d, "state.json"), "w") as f:
                    _json.dump({"epoch": epoch}, f)
                report(metrics, checkpoint=Checkpoint.from_directory(d))
        else:
            report(metrics)


def digits_fn(config, data):
    """The digits CNN of ``raynb demo`` with a checkpoint (model, optimizer, epoch) every epoch."""
    import os as _os
    import tempfile as _tempfile

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from raynb.demo import make_model
    from raynb.train import Checkpoint, get_checkpoint, get_context, report
    from raynb.train.torch import prepare_data_loader, prepare_model

    torch.manual_seed(0)
    X_tr, y_tr, X_va, y_va = (torch.from_numpy(a) for a in data)
    model, opt_state, start = make_model(), None, 0
    ckpt = get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = torch.load(_os.path.join(d, "state.pt"))
        model.load_state_dict(state["model"])
        opt_state, start = state["optimizer"], state["epoch"] + 1
    model = prepare_model(model)
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
    if opt_state is not None:
        opt.load_state_dict(opt_state)
    loader = prepare_data_loader(DataLoader(TensorDataset(X_tr, y_tr), batch_size=32, shuffle=True))
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(start, config["epochs"]):
        model.train()
        for xb, yb in loader:
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            val_accuracy = (model(X_va).argmax(1) == y_va).float().mean().item()
        metrics = {"epoch": epoch, "start_epoch": start, "val_accuracy": val_accuracy}
        if get_context().get_world_rank() == 0:
            with _tempfile.TemporaryDirectory() as d:
                torch.save(
                    {"model": model.module.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch},
                    _os.path.join(d, "state.pt"),
                )
                report(metrics, checkpoint=Checkpoint.from_directory(d))
        else:
            report(metrics)


# -- helpers ----------------------------------------------------------------------------
class _ArrivalLog:
    """When each event of the followed run reached this process.

    ``fit()`` hands every event it receives to its progress view as it arrives;
    while installed, this wraps that view (``raynb.client.views.run_view``) and stamps
    rank 0's reports and the head's notes with ``time.time()``."""

    def __init__(self):
        self.events: list[tuple[float, dict]] = []

    def __enter__(self):
        import raynb.client.views as views

        self._views, self._orig = views, views.run_view
        log = self

        def make_display(*args, **kwargs):
            display = log._orig(*args, **kwargs)
            handle = display.handle

            def stamped(event, _handle=handle):
                if event.get("kind") == "note" or (event.get("kind") == "report" and event.get("rank") == 0):
                    log.events.append((time.time(), event))
                return _handle(event)

            display.handle = stamped
            return display

        views.run_view = make_display
        return self

    def __exit__(self, *exc):
        self._views.run_view = self._orig


class _Killer(threading.Thread):
    """SIGKILLs rank ``KILL_RANK`` of run ``name`` once ``checkpoint_<index>`` exists in
    ``run_dir``; ``kill_time`` is ``time.time()`` just before ``os.kill``."""

    def __init__(self, name: str, run_dir: str, index: int, timeout: float = 120.0):
        super().__init__(daemon=True)
        self.name_, self.target = name, os.path.join(run_dir, f"checkpoint_{index:06d}")
        self.timeout = timeout
        self.kill_time = self.pid = self.error = None

    def run(self):
        import raynb

        try:
            deadline = time.monotonic() + self.timeout
            while not os.path.isdir(self.target):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.target} did not appear within {self.timeout:.0f} s")
                time.sleep(0.002)
            workers = raynb.cluster_status()["workers"]
            self.pid = next(w["pid"] for w in workers if w["run"] == self.name_ and w["rank"] == KILL_RANK)
            self.kill_time = time.time()
            os.kill(self.pid, signal.SIGKILL)
        except Exception as e:  # noqa: BLE001 - reported by the caller
            self.error = e


def _fit(fn, config, name: str, storage: str, max_failures: int):
    from raynb import FailureConfig, RunConfig, ScalingConfig, TorchTrainer

    return TorchTrainer(
        fn,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=WORKERS),
        run_config=RunConfig(
            name=name,
            storage_path=storage,
            verbose=0,
            failure_config=FailureConfig(max_failures=max_failures),
        ),
    ).fit()


def _killed_run(fn, config, name: str, storage: str, kill_after_checkpoint: int):
    """One run with rank ``KILL_RANK`` killed once the given checkpoint is committed.
    Returns (Result, killer, arrival log, wall seconds of fit())."""
    killer = _Killer(name, os.path.join(storage, name), kill_after_checkpoint)
    killer.start()
    with _ArrivalLog() as log:
        t = time.perf_counter()
        result = _fit(fn, config, name, storage, max_failures=1)
        wall = time.perf_counter() - t
    killer.join(timeout=10)
    if killer.error is not None or killer.kill_time is None:
        raise RuntimeError(f"run {name}: the kill went wrong: {killer.error!r}")
    f = result.failures
    if (
        result.state != "FINISHED"
        or len(f) != 1
        or f[0].get("rank") != KILL_RANK
        or f[0].get("signal") != "SIGKILL"
        or f[0].get("pid") != killer.pid
    ):
        raise RuntimeError(
            f"run {name} did not recover from one SIGKILL as expected: {result!r}, failures {f}"
        )
    df = result.metrics_dataframe
    epochs = df[df.start_epoch > 0].epoch.tolist()
    if not epochs or epochs != list(range(epochs[0], config["epochs"])):
        raise RuntimeError(f"run {name}: the restarted attempt reported epochs {epochs}")
    return result, killer, log, wall


def _summary_s(xs: list[float]) -> dict:
    return {
        "median": round(statistics.median(xs), 3),
        "p90": round(quantile(xs, 0.9), 3),
        "min": round(min(xs), 3),
        "max": round(max(xs), 3),
        "n": len(xs),
        "all": [round(x, 3) for x in xs],
    }


# -- the measurements -----------------------------------------------------------------
def measure_torch_import(n: int = 3) -> dict:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True, timeout=300)
        times.append(time.perf_counter() - t)
    return {"median": round(statistics.median(times), 3), "n": n, "all": [round(x, 3) for x in times]}


def measure_resume(kills: int, epoch_s: float, storage: str) -> dict:
    config = {"epochs": 8, "epoch_s": epoch_s}
    _fit(epochs_fn, config, "resume_warmup", storage, max_failures=0)  # untimed: forms the process group
    total, to_note, note_to_start, start_to_report, report_to_client = [], [], [], [], []
    for i in range(kills):
        _, killer, log, _ = _killed_run(
            epochs_fn, config, f"resume_{i:03d}", storage, kill_after_checkpoint=2
        )
        note_t = next(t for t, ev in log.events if ev.get("kind") == "note" and ev.get("restart"))
        arrived, m = next(
            (t, ev["metrics"])
            for t, ev in log.events
            if ev.get("kind") == "report" and ev["metrics"].get("start_epoch", 0) > 0
        )
        total.append(arrived - killer.kill_time)
        to_note.append(note_t - killer.kill_time)
        note_to_start.append(m["fn_start"] - note_t)
        start_to_report.append(m["reported_at"] - m["fn_start"])
        report_to_client.append(arrived - m["reported_at"])
    med = lambda xs: round(statistics.median(xs) * 1000, 1)  # noqa: E731
    return {
        "resume_s": _summary_s(total),
        "resume_split_ms": {
            "kill_to_restart_note_at_client": med(to_note),
            "restart_note_to_rank0_fn_start": med(note_to_start),
            "rank0_fn_start_to_first_report": med(start_to_report),
            "first_report_to_client": med(report_to_client),
        },
        "resume_target_s": TARGET_RESUME_S,
        "resume_median_under_target": statistics.median(total) < TARGET_RESUME_S,
    }


def measure_total_time(pairs: int, storage: str) -> dict:
    from raynb.demo import load_digits_split

    fn = partial(digits_fn, data=load_digits_split())
    config = {"lr": 3e-3, "epochs": 15}
    _fit(fn, config, "digits_warmup", storage, max_failures=0)  # untimed
    clean, failed, acc_clean, acc_failed, resume, to_note = [], [], [], [], [], []
    for i in range(pairs):
        t = time.perf_counter()
        r = _fit(fn, config, f"digits_clean_{i:03d}", storage, max_failures=1)
        clean.append(time.perf_counter() - t)
        if r.state != "FINISHED" or r.failures:
            raise RuntimeError(f"an uninterrupted digits run went wrong: {r!r}")
        acc_clean.append(r.metrics["val_accuracy"])
        r, killer, log, wall = _killed_run(
            fn, config, f"digits_killed_{i:03d}", storage, kill_after_checkpoint=7
        )
        failed.append(wall)
        to_note.append(next(t for t, ev in log.events if ev.get("kind") == "note") - killer.kill_time)
        resume.append(
            next(
                t
                for t, ev in log.events
                if ev.get("kind") == "report" and ev["metrics"].get("start_epoch", 0) > 0
            )
            - killer.kill_time
        )
        acc_failed.append(r.metrics["val_accuracy"])
    mc, mf = statistics.median(clean), statistics.median(failed)
    return {
        "total_time_s": {
            "no_failure": {"median": round(mc, 3), "all": [round(x, 3) for x in clean]},
            "one_failure": {"median": round(mf, 3), "all": [round(x, 3) for x in failed]},
            "ratio": round(mf / mc, 3),
            "extra_s": round(mf - mc, 3),
            "kill_to_first_report_s": _summary_s(resume),
            "kill_to_restart_note_ms": round(statistics.median(to_note) * 1000, 1),
            "final_val_accuracy": {
                "no_failure": [round(a, 4) for a in acc_clean],
                "one_failure": [round(a, 4) for a in acc_failed],
            },
        }
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--kills", type=int, default=12, help="runs with one worker killed, for resume_s (default 12)"
    )
    ap.add_argument(
        "--epoch-ms", type=float, default=20.0, help="work per epoch in the resume_s runs, ms (default 20)"
    )
    ap.add_argument(
        "--pairs", type=int, default=5, help="digits runs timed without and with a failure, each (default 5)"
    )
    ap.add_argument("--quick", action="store_true", help="smoke test: 3 kills, 1 pair, 1 torch import")
    args = ap.parse_args(argv)
    imports = 3
    if args.quick:
        args.kills, args.pairs, imports = min(args.kills, 3), min(args.pairs, 1), 1
    if args.kills < 1 or args.pairs < 1:
        ap.error("--kills and --pairs must be >= 1")

    load_at_start = round(os.getloadavg()[0], 2)
    report: dict = {"torch_import_s": measure_torch_import(imports)}
    with private_cluster() as (_, storage):
        import raynb

        subprocess.run(
            raynb_cli() + ["start", "--workers", str(WORKERS)],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=300,
        )
        report.update(measure_resume(args.kills, args.epoch_ms / 1000, storage))
        report.update(measure_total_time(args.pairs, storage))
        raynb.disconnect()
    report["resume_vs_torch_import"] = round(
        report["torch_import_s"]["median"] / report["resume_s"]["median"], 1
    )
    report["machine"] = machine_info(load_at_start, load_avg_1m_at_end=round(os.getloadavg()[0], 2))
    report["settings"] = {
        "workers": WORKERS,
        "killed_rank": KILL_RANK,
        "kills": args.kills,
        "epoch_ms": args.epoch_ms,
        "resume_run_epochs": 8,
        "pairs": args.pairs,
        "digits_epochs": 15,
        "torch_imports": imports,
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
