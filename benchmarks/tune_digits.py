"""The README's Tune example, made runnable: wall time of 16 ASHA trials of the digits CNN. Prints one JSON object.

The example of README.md's "Hyperparameter tuning" section, with the trainable of
``notebooks/02_tune.ipynb`` but *without* its ``torch.set_num_threads(1)``: each trial
runs with the threads raynb gives its rank (``--trial-threads N`` sets them in the
trial instead, the notebook's workaround). 16 samples of lr / hidden / batch size, seeded
(``BasicVariantGenerator(random_state=6)``, so every invocation trains the same
configurations), ``ASHAScheduler(max_t=8, grace_period=1, reduction_factor=2)``, on a
private cluster of 4 workers (its own temporary ``RAYNB_HOME`` and
``RAYNB_STORAGE_PATH``, stopped at the end), so 4 trials run at a time.

What is timed: ``Tuner(...).fit()``, submit of the first trial to the ``ResultGrid``
(the cluster is started and warm before). Also: epochs trained in all, the best
``val_accuracy``, the thread counts the trials saw (their first epoch's), and the load
average at the start and the end.

Usage::

    python -m benchmarks.tune_digits                      # the example (16 samples)
    python -m benchmarks.tune_digits --trial-threads 1    # with the notebook's set_num_threads(1)
    python -m benchmarks.tune_digits --quick              # smoke test: 4 samples, max_t 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from benchmarks._common import machine_info, private_cluster  # noqa: E402

WORKERS = 4


def train_digits(config):
    """One trial: the digits CNN, one report per epoch (notebooks/02_tune.ipynb)."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from raynb import tune
    from raynb.demo import load_digits_split, make_model

    if config.get("trial_threads"):
        torch.set_num_threads(config["trial_threads"])
    x_tr, y_tr, x_va, y_va = (torch.from_numpy(a) for a in load_digits_split())
    torch.manual_seed(config["seed"])
    model = make_model(config["hidden"])
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
    loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=config["batch_size"], shuffle=True)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(config["epochs"]):
        model.train()
        for xb, yb in loader:
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            out = model(x_va)
        tune.report(
            {
                "epoch": epoch,
                "threads": torch.get_num_threads(),
                "val_accuracy": (out.argmax(1) == y_va).float().mean().item(),
            }
        )


def measure(samples: int, max_t: int, trial_threads: int | None) -> dict:
    import cloudpickle

    import raynb
    from raynb import tune
    from raynb.cluster.launch import start_cluster
    from raynb.tune.schedulers import ASHAScheduler
    from raynb.tune.search import BasicVariantGenerator

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    start_cluster(num_workers=WORKERS)  # warm before the clock starts (and quiet: stdout is JSON)
    raynb.connect()
    space = {
        "lr": tune.loguniform(1e-4, 1e-1),
        "hidden": tune.choice([16, 32, 64]),
        "batch_size": tune.choice([32, 64, 128]),
        "epochs": max_t,
        "seed": 0,
        "trial_threads": trial_threads,
    }
    tuner = tune.Tuner(
        train_digits,
        param_space=space,
        tune_config=tune.TuneConfig(
            metric="val_accuracy",
            mode="max",
            num_samples=samples,
            scheduler=ASHAScheduler(max_t=max_t, grace_period=1, reduction_factor=2),
            search_alg=BasicVariantGenerator(random_state=6),
        ),
        run_config=tune.RunConfig(name="tune_digits", verbose=0),
    )
    t0 = time.perf_counter()
    grid = tuner.fit()
    wall = time.perf_counter() - t0
    df = grid.get_dataframe()
    firsts = [int(r.metrics_dataframe["threads"].iloc[0]) for r in grid if len(r.metrics_dataframe)]
    raynb.disconnect()
    return {
        "fit_s": round(wall, 2),
        "trials": len(grid),
        "errors": grid.num_errors,
        "epochs_trained": int(df["training_iteration"].sum()),
        "best_val_accuracy": round(float(grid.get_best_result().metrics["val_accuracy"]), 4),
        "first_epoch_threads": {str(n): firsts.count(n) for n in sorted(set(firsts))},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=16, help="trials (default 16)")
    ap.add_argument("--max-t", type=int, default=8, help="epochs of a trial at most (default 8)")
    ap.add_argument(
        "--trial-threads",
        type=int,
        default=None,
        help="torch.set_num_threads(N) in every trial (default: raynb's share)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke test: 4 samples, max_t 2")
    args = ap.parse_args(argv)
    if args.quick:
        args.samples, args.max_t = min(args.samples, 4), min(args.max_t, 2)
    if args.samples < 1 or args.max_t < 1:
        ap.error("--samples and --max-t must be >= 1")
    load_at_start = round(os.getloadavg()[0], 2)
    with private_cluster():
        report = measure(args.samples, args.max_t, args.trial_threads)
    report["machine"] = machine_info(load_at_start, load_avg_1m_at_end=round(os.getloadavg()[0], 2))
    report["settings"] = {
        "workers": WORKERS,
        "samples": args.samples,
        "max_t": args.max_t,
        "trial_threads": args.trial_threads,
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
